#!/usr/bin/env bash
# gpu_bundle.sh — builds HERE (no GPU needed) everything scripts/gpu_check.sh runs on a lent GPU
# machine, so the loan's minutes go to the GPU, not to configuring and compiling on a bare image.
#
#   scripts/gpu_bundle.sh [--arch 90] [--out .gpu] [--build-dir build-gpu] [--part-mib N] [--no-model] [--no-llama]
#   scripts/gpu_bundle.sh --print-programs     the programs it bundles beside the CUDA tests
#   scripts/gpu_bundle.sh --print-calls-md     the CALLS.md a bundle would get, building nothing (the
#                                              sizes of the archives already in <out>, else assumed)
#
# 1. Configures build-gpu/ for one GPU architecture (sm_90 = H100 / H200 by default; --arch 80 for
#    an A100), host code without -march=native (the packed CPU kernels pick their ISA at run time,
#    so the binaries run on the lent machine's CPU, which is not this one) and without MPI (that
#    image has no Open MPI; NCCL is loaded at run time when it is there), RUNPATH $ORIGIN/../lib.
# 2. Builds every CUDA test binary, every CUDA grading test with its stub twin (chNN_task_K_cuda_*:
#    gpu_check.sh's step grade_cuda), bench_cuda_decode, bench_cuda_gemv, ch07_flash_attention, lio
#    and lio-server, strips them, and copies beside them the shared libraries the GPU image lacks
#    (found with ldd: everything but glibc, libstdc++/libgcc and the CUDA toolkit's cuBLAS, which
#    that image has; the CUDA runtime travels too, it is small). No path of this machine is needed
#    there: the model comes through LIO_MODEL, the commit through LIO_COMMIT (MANIFEST.txt).
# 3. Packs them into <out>/lio-gpu.tar.xz (at most 60 MiB, checked).
# 4. Cuts the model (98 MB: more than one call carries) into parts (<out>/model.partNN; its sha256
#    in MANIFEST.txt, checked against the reassembled parts here and there) so that the bundle and
#    the parts fill the fewest device calls of 64 MiB beside the working tree (--part-mib caps a
#    call's payload lower), and writes those calls, ready to paste, to <out>/CALLS.md
#    (docs/cuda_backend.md, "Validate on a GPU in one call", explains them) with each step's
#    estimated seconds (scripts/gpu_check.sh --list-steps), the device minutes of the calls and the
#    check, the steps a 10-minute plan skips (run in the rerun slot), and a ready `--only` rerun.
# 5. When build-llama-cuda/ holds llama.cpp's CUDA tools for the same architecture
#    (bench/batched/build_llama_tools.sh --cuda-arch 90, made here without a GPU), packs llama-bench,
#    llama-batched-bench and their shared libraries as <out>/llama-cuda.tar.xz, carried in the same
#    calls: gpu_check.sh then measures the peer on the same card (issue 45). --no-llama leaves it out.
# Prints the archive's size and the build time. <out> and build-gpu/ are gitignored.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

arch=90
out=.gpu
build_dir=build-gpu
part_mib=0  # 0: as much as a call carries
with_model=1
with_llama=1
jobs="$(nproc)"
print_programs=0
print_calls_md=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) arch="$2"; shift ;;
    --out) out="$2"; shift ;;
    --build-dir) build_dir="$2"; shift ;;
    --part-mib) part_mib="$2"; shift ;;
    --no-model) with_model=0 ;;
    --no-llama) with_llama=0 ;;
    --jobs) jobs="$2"; shift ;;
    --print-programs) print_programs=1 ;;
    --print-calls-md) print_calls_md=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {print}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
# The programs gpu_check.sh runs besides the CUDA test binaries (--print-programs lists them: CI's
# dry run checks each exists in the build, so a renamed target cannot break the next GPU loan).
programs=(bench_cuda_decode bench_cuda_gemv ch07_flash_attention lio lio-server)
if ((print_programs)); then printf '%s\n' "${programs[@]}"; exit 0; fi
[[ "$arch" =~ ^[0-9]+a?$ ]] || { echo "gpu_bundle.sh: --arch wants a compute capability like 90 or 80, got $arch" >&2; exit 2; }

# The limits of a device call (the device tool's README): what travels per call, and what may
# come back. The bundle must leave room for a model part and the working tree beside it.
readonly kCallMiB=64 kBundleMaxMiB=60
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
log() { echo "[gpu_bundle] $*"; }

# ---- device calls: what each carries, and CALLS.md (the build's last step; --print-calls-md alone) -
# The device tool's times that CALLS.md plans with (its README and what our loans saw): a machine's
# start (a minute or more by the README; taken as 3), one call's transfer and overhead (six calls
# back to back took under two minutes with 35 s of work in them, docs/cuda_backend.md's Gemma 3
# check: about 15 s a call; taken as 20), the idle time before a warm machine goes back, a task's
# device time, and the plan inside it: the calls and the check in 10 minutes, the rest for a rerun.
readonly kStartS=180 kCallS=20 kIdleS=30 kDeviceS=900 kPlanS=600

tree_size() {  # bytes of the working tree, which travels with every call (tracked and untracked, not ignored)
  { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r stat -c %s -- 2>/dev/null |
    awk '{s += $1} END {print s + 0}'
}

# plan_calls BUNDLE_BYTES LLAMA_BYTES TREE_BYTES CUT: fills calls[] (each entry: the files one device
# call carries, space-separated) and budget (the payload bytes of one call). Call 1 carries the bundle
# and the model's first bytes up to the budget, each later call the next budget's worth: the fewest
# calls for the bytes. CUT=1 writes the model parts and checks they reassemble to the model.
plan_calls() {
  local bundle_bytes="$1" llama_bytes="$2" tree_bytes="$3" cut="$4"
  budget=$((kCallMiB * 1048576 - tree_bytes - 2 * 1048576))  # 2 MiB of slack
  if ((part_mib > 0 && part_mib * 1048576 < budget)); then budget=$((part_mib * 1048576)); fi
  if ((bundle_bytes > budget)); then
    echo "gpu_bundle.sh: the bundle ($((bundle_bytes / 1048576)) MiB) does not fit a call beside the $((tree_bytes / 1048576)) MiB tree" >&2
    return 1
  fi
  calls=("$out/lio-gpu.tar.xz")
  local room=$((budget - bundle_bytes))
  if ((llama_bytes > 0)); then
    if ((llama_bytes > budget)); then
      echo "gpu_bundle.sh: llama-cuda.tar.xz ($((llama_bytes / 1048576)) MiB) does not fit a call (--no-llama leaves it out)" >&2
      return 1
    fi
    if ((llama_bytes <= room)); then
      calls[0]="${calls[0]} $out/llama-cuda.tar.xz"
      room=$((room - llama_bytes))
    else
      calls+=("$out/llama-cuda.tar.xz")
      room=$((budget - llama_bytes))
    fi
  fi
  ((with_model)) || return 0
  local model_bytes=98362432  # the Q4_1 file's size, for --print-calls-md without it
  if [[ -f "$model" ]]; then
    model_bytes=$(stat -L -c %s "$model")
  elif ((cut)); then
    echo "gpu_bundle.sh: $model missing: run scripts/fetch_model.sh (or pass --no-model)" >&2
    return 1
  fi
  local offset=0 part=0 n f last
  ((cut)) && rm -f "$out"/model.part*
  while ((offset < model_bytes)); do
    if ((room <= 0)); then calls+=(""); room=$budget; fi
    n=$((model_bytes - offset < room ? model_bytes - offset : room))
    f=$(printf '%s/model.part%02d' "$out" "$part")
    ((cut)) && dd if="$model" of="$f" bs=1M iflag=skip_bytes,count_bytes skip="$offset" count="$n" status=none
    last=$((${#calls[@]} - 1))
    calls[last]="${calls[last]:+${calls[last]} }$f"
    offset=$((offset + n))
    room=$((room - n))
    part=$((part + 1))
  done
  if ((cut)); then
    cat "$out"/model.part* | sha256sum | cut -d' ' -f1 | grep -qx "$(grep '^model_sha256=' "$out/MANIFEST.txt" | cut -d= -f2)" ||
      { echo "gpu_bundle.sh: the model parts do not reassemble to the model" >&2; return 1; }
  fi
}

# write_calls_md COMMIT BUNDLE_BYTES LLAMA_BYTES TREE_BYTES NOTE: CALLS.md on stdout, from calls[]
# and the steps' estimates (scripts/gpu_check.sh --list-steps, where they live).
write_calls_md() {
  python3 - "$root" "$kStartS" "$kCallS" "$kIdleS" "$kDeviceS" "$kPlanS" "$@" "${calls[@]}" <<'PY'
import re, subprocess, sys, textwrap
root, start_s, call_s, idle_s, device_s, plan_s = sys.argv[1], *map(int, sys.argv[2:7])
commit, bundle_bytes, llama_bytes, tree_bytes, note = sys.argv[7], *map(int, sys.argv[8:11]), sys.argv[11]
calls = [c.split() for c in sys.argv[12:]]
listing = subprocess.run(["bash", f"{root}/scripts/gpu_check.sh", "--list-steps"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout.splitlines()
steps = [line.split(None, 3) for line in listing if line.strip() and not line.startswith("#")]
overhead_s = int(re.search(r"unpack \+ report (\d+) s", "\n".join(listing)).group(1))
skip_first = next(l for l in listing if l.startswith("# skip first")).split(":", 1)[1].split()
peer = {"peer_decode", "peer_batched"}
def seconds(sid, est):
    """A step's estimate in this plan: without llama.cpp the peer steps only parse their command lines."""
    return 0 if sid in peer and not llama_bytes else int(est)
est = {sid: seconds(sid, e) for sid, e, _, _ in steps}
full_s = sum(est.values()) + overhead_s
fixed_s = start_s + len(calls) * call_s + idle_s  # everything but the check
room_s = plan_s - fixed_s                         # what the plan leaves the check
skipped, check_s = [], full_s
for sid in skip_first:
    if check_s <= room_s:
        break
    if est.get(sid):
        skipped.append(sid)
        check_s -= est[sid]
flags = (" --skip " + ",".join(skipped) if skipped else "") + (f" --budget-s {room_s}" if room_s < 450 else "")
def mib(n):
    return f"{n / 1048576:.1f} MiB"
def mins(s):
    return f"{s} s ({s / 60:.1f} min)"
def para(*text):
    """One paragraph, wrapped at 100 columns, then a blank line."""
    return textwrap.wrap(" ".join(text), 100, break_on_hyphens=False) + [""]

out = [f"# Device calls for the GPU check (written by scripts/gpu_bundle.sh at commit {commit})", ""]
if note:
    out += [f"({note}.)", ""]
out += para(f"Bundle {mib(bundle_bytes)}" + (f", llama.cpp's CUDA tools {mib(llama_bytes)}" if llama_bytes else "") + ",",
            f"working tree {mib(tree_bytes)}; {len(calls)} call(s). Make them back to back: a warm machine is given",
            "back after 30 s idle, and what the first calls leave in /tmp/lio-gpu is gone with it. Each call: the",
            "device tool's `run` with the carry list and command below (kind left out).")
for i, files in enumerate(calls, 1):
    carry = "[" + ", ".join(f'"{f}"' for f in files) + "]"
    cmd = f"mkdir -p /tmp/lio-gpu && cp {' '.join(files)} /tmp/lio-gpu/ && "
    if i < len(calls):
        out += [f"{i}. carry {carry}, timeout_s 120, command:", "", f"   `{cmd}ls -l /tmp/lio-gpu && nvidia-smi -L`", ""]
    else:
        out += [f"{i}. carry {carry}, timeout_s 540, command:", "",
                f"   `{cmd}bash scripts/gpu_check.sh --from /tmp/lio-gpu --out \"$OUT\"{flags}`", ""]
out += para("The last call's $OUT holds cuda_<gpu>_validation.{md,json} and gpu_check.log: copy the first two",
            "into bench/results/ and commit them.",
            "With llama.cpp carried, it also holds the peer comparisons cuda_peer_decode.{md,json} and"
            " cuda_batched.{md,json,csv}: commit them as bench/results/cuda_<gpu>_peer_decode.* and"
            " cuda_<gpu>_batched.*." if llama_bytes else "")
out += ["## Time", ""]
out += para("Each step's seconds on an H200, from `bash scripts/gpu_check.sh --list-steps` (h200: measured in",
            "bench/results/cuda_h200_validation.json, the last GPU run; h200+: that plus an estimate for what the",
            "step gained since; est: estimated, never run):")
out += ["| step id | s | source | step |", "|---|---:|---|---|"]
for sid, e, src, what in steps:
    cell = str(est[sid]) if est[sid] == int(e) else f"{est[sid]} ({e} with llama.cpp: only its command line is parsed)"
    out.append(f"| `{sid}` | {cell} | {src} | {what.replace('|', '/')} |")
out += [f"| | {overhead_s} | est | unpacking the bundle, the report |",
        f"| **the full check** | **{full_s}** | | |", ""]
out += para(f"Device time (a task has {device_s // 60} minutes, machine start included; the plan: the calls and",
            f"the check within {plan_s // 60}, the rest for one rerun of the failed steps):")
out += ["| part | s |", "|---|---:|",
        f"| the machine's start, in call 1 (a minute or more; taken as 3) | {start_s} |",
        f"| {len(calls)} call(s): transfer and overhead, about {call_s} s each | {len(calls) * call_s} |",
        f"| the check, in the last call{' (' + flags.strip() + ')' if flags else ''} | {check_s} |",
        f"| idle until the machine goes back (or `give_back` at once) | {idle_s} |",
        f"| **the calls and the check** | **{mins(fixed_s + check_s)}** |", ""]
if skipped:
    rest = [f"`{s}`" for s in skip_first if s not in skipped and est.get(s)]
    out += para(f"The full check would take {mins(fixed_s + full_s)}, over the {plan_s // 60}-minute plan: the last",
                f"call skips `{','.join(skipped)}` ({sum(est[s] for s in skipped)} s estimated)" +
                (f"; should the estimates prove low, skip next, in this order: {', '.join(rest)}." if rest else "."))
if room_s < 450:
    out += para(f"`--budget-s {room_s}` keeps the check inside the plan: a step that would start past it is skipped",
                "and reported, and its id printed for a rerun.")
left_s = device_s - fixed_s - check_s
out += ["## Rerun of the failed steps", ""]
out += para("The check's last lines name what to redo: `rerun the failed steps: ... --only <ids>` and, when",
            "the time budget ran out, `not run within the time budget: --only <ids>`. Make the rerun at once",
            "after the last call, while the machine is warm: it keeps /tmp/lio-gpu only while warm (30 s after a",
            "call). One call:")
out += ["   carry [], timeout_s 300, command:", "",
        "   `bash scripts/gpu_check.sh --from /tmp/lio-gpu --out \"$OUT\" --only <ids>`", ""]
earlier = {1: "", 2: "call 1"}.get(len(calls), f"calls 1-{len(calls) - 1}")
again = (f"make {earlier} again, then call {len(calls)}" if earlier else "make call 1 again") + \
    " with `--only <ids>` in place of its flags"
out += para(f"It costs about {call_s + overhead_s} s plus the steps' seconds above (the model is reassembled when a",
            "step needs it).",
            f"With nothing failed, the same call with `--only {','.join(skipped)}` runs what the plan skipped (about"
            f" {call_s + overhead_s + sum(est[s] for s in skipped)} s)." if skipped else "",
            f"On a cold machine (given back), /tmp/lio-gpu is gone: {again}: {start_s + len(calls) * call_s} s before",
            f"the steps. The plan leaves {mins(left_s)} of the {device_s // 60} device minutes for the rerun.")
print("\n".join(out).rstrip())
PY
}
if ((print_calls_md)); then
  # What a bundle's CALLS.md would say, nothing built: the archives already in $out, else the sizes
  # of the last bundle (8 MiB; llama.cpp's CUDA tools 31 MiB, carried unless --no-llama).
  note="example from --print-calls-md, nothing built; sizes:"
  bundle_bytes=$(stat -c %s "$out/lio-gpu.tar.xz" 2>/dev/null) && note+=" $out/lio-gpu.tar.xz's" ||
    { bundle_bytes=$((8 * 1048576)); note+=" the bundle assumed 8 MiB"; }
  llama_bytes=0
  if ((with_llama)); then
    llama_bytes=$(stat -c %s "$out/llama-cuda.tar.xz" 2>/dev/null) && note+=", $out/llama-cuda.tar.xz's" ||
      { llama_bytes=$((31 * 1048576)); note+=", llama.cpp's tools assumed 31 MiB"; }
  fi
  tree_bytes=$(tree_size)
  plan_calls "$bundle_bytes" "$llama_bytes" "$tree_bytes" 0 || exit 1
  write_calls_md "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$bundle_bytes" "$llama_bytes" "$tree_bytes" "$note"
  exit 0
fi
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
  { echo "gpu_bundle.sh: nvcc not found: the CUDA toolkit builds the bundle (no GPU needed)" >&2; exit 1; }
t0=$SECONDS

# ---- 1-2. configure and build -----------------------------------------------------------------
log "configuring $build_dir (sm_$arch, no -march=native, no MPI)"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLIO_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DLIO_NATIVE=OFF -DLIO_MPI=OFF \
  -DLIO_BUILD_TESTS=ON -DLIO_BUILD_BENCH=ON -DLIO_SANITIZE=OFF \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib' >/dev/null
mapfile -t cuda_tests < <(ninja -C "$build_dir" -t targets all | sed -n 's#^bin/\(test_cuda_[a-z0-9_]*\): .*#\1#p' | sort -u)
((${#cuda_tests[@]})) || { echo "gpu_bundle.sh: no test_cuda_* target in $build_dir: is CUDA enabled?" >&2; exit 1; }
# The CUDA grading tests (tests/grade/CMakeLists.txt, lio_add_cuda_grade_test): each on the reference
# solution and its _stub twin on the stubs; gpu_check.sh's step grade_cuda runs both.
mapfile -t cuda_grades < <(ninja -C "$build_dir" -t targets all |
                           sed -n 's#^bin/\(ch[0-9][0-9]_task_[0-9]*_cuda_[a-z0-9_]*\): .*#\1#p' | sort -u)
log "building ${#cuda_tests[@]} CUDA test binaries, ${#cuda_grades[@]} CUDA grading tests and ${programs[*]} ($jobs jobs)"
ninja -C "$build_dir" -j "$jobs" "${cuda_tests[@]}" "${cuda_grades[@]}" "${programs[@]}"
t_build=$((SECONDS - t0))

# ---- 3. stage: stripped binaries, the libraries the image lacks, the manifest ---------------------
stage="$out/stage/lio-gpu"
rm -rf "$out/stage" && mkdir -p "$stage/bin" "$stage/lib"
for b in "${cuda_tests[@]}" "${cuda_grades[@]}" "${programs[@]}"; do
  cp "$build_dir/bin/$b" "$stage/bin/"
  strip --strip-unneeded "$stage/bin/$b"
done
# glibc and the compiler runtime are the image's own (it is newer than this Debian; a binary built
# against an older glibc runs on a newer one); cuBLAS is the CUDA toolkit's (600 MB: never carried).
keep_out='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libnccl)\.so'
declare -A bundled=()
for b in "$stage"/bin/*; do
  while read -r soname path; do
    [[ -n "$path" && -f "$path" ]] || continue
    [[ "$soname" =~ $keep_out ]] && continue
    if [[ -z "${bundled[$soname]:-}" ]]; then
      cp -L "$path" "$stage/lib/$soname"
      bundled[$soname]=1
    fi
  done < <(ldd "$b" | awk '$2 == "=>" {print $1, $3}')
done
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] || commit="$commit-dirty"
{
  echo "commit=$commit"
  echo "arch=sm_$arch"
  echo "built=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "builder_cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "nvcc=$( (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "cuda_tests=${cuda_tests[*]}"
  echo "cuda_grades=${cuda_grades[*]}"
  echo "programs=${programs[*]}"
  echo "bundled_libs=${!bundled[*]}"
  echo "max_glibcxx=$(for b in "$stage"/bin/*; do objdump -T "$b"; done | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
  echo "max_glibc=$(for b in "$stage"/bin/*; do objdump -T "$b"; done | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
  if ((with_model)) && [[ -f "$model" ]]; then
    echo "model=$(basename "$model")"
    echo "model_bytes=$(stat -L -c %s "$model")"
    echo "model_sha256=$(sha256sum "$model" | cut -d' ' -f1)"
  fi
} >"$stage/MANIFEST.txt"
cp "$stage/MANIFEST.txt" "$out/MANIFEST.txt"

# ---- 4. the archive and the model parts ----------------------------------------------------------
log "packing $out/lio-gpu.tar.xz"
rm -f "$out"/lio-gpu.tar.xz "$out"/model.part*
XZ_OPT="-9 -T$jobs" tar -C "$out/stage" -cJf "$out/lio-gpu.tar.xz" lio-gpu
bundle_bytes=$(stat -c %s "$out/lio-gpu.tar.xz")
if ((bundle_bytes > kBundleMaxMiB * 1048576)); then
  echo "gpu_bundle.sh: the bundle is $((bundle_bytes / 1048576)) MiB, over the $kBundleMaxMiB MiB limit" >&2
  exit 1
fi

# ---- 4b. llama.cpp's CUDA tools, when built for this architecture ---------------------------------
llama_build=build-llama-cuda
rm -f "$out/llama-cuda.tar.xz"
llama_bytes=0
if ((with_llama)); then
  llama_arch="$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$llama_build/CMakeCache.txt" 2>/dev/null)"
  if [[ -x "$llama_build/bin/llama-bench" && -x "$llama_build/bin/llama-batched-bench" && "$llama_arch" == "$arch" ]]; then
    lstage="$out/stage/llama-cuda"
    mkdir -p "$lstage/bin" "$lstage/lib"
    cp "$llama_build/bin/llama-bench" "$llama_build/bin/llama-batched-bench" "$lstage/bin/"
    cp -L "$llama_build"/bin/lib*.so* "$lstage/lib/" 2>/dev/null || true
    # What the image lacks, as for LIO's binaries (the CUDA runtime, libgomp); never the driver,
    # cuBLAS or glibc (keep_out).
    for b in "$lstage"/bin/* "$lstage"/lib/*; do
      while read -r soname path; do
        [[ -n "$path" && -f "$path" ]] || continue
        [[ "$soname" =~ $keep_out || -e "$lstage/lib/$soname" ]] && continue
        cp -L "$path" "$lstage/lib/$soname"
      done < <(LD_LIBRARY_PATH="$lstage/lib" ldd "$b" | awk '$2 == "=>" {print $1, $3}')
    done
    strip --strip-unneeded "$lstage"/bin/* "$lstage"/lib/* 2>/dev/null || true
    log "packing $out/llama-cuda.tar.xz (llama.cpp's CUDA tools, sm_$arch)"
    XZ_OPT="-9 -T$jobs" tar -C "$out/stage" -cJf "$out/llama-cuda.tar.xz" llama-cuda
    llama_bytes=$(stat -c %s "$out/llama-cuda.tar.xz")
  else
    log "no llama.cpp CUDA tools for sm_$arch in $llama_build (bench/batched/build_llama_tools.sh --cuda-arch $arch): the check runs without the peer"
  fi
fi

# ---- 5. device calls: each carries what fits beside the working tree ----------------------------
tree_bytes=$(tree_size)
plan_calls "$bundle_bytes" "$llama_bytes" "$tree_bytes" 1 || exit 1
n_calls=${#calls[@]}
write_calls_md "$commit" "$bundle_bytes" "$llama_bytes" "$tree_bytes" "" >"$out/CALLS.md"

log "bundle: $out/lio-gpu.tar.xz, $(numfmt --to=iec-i --suffix=B "$bundle_bytes") (limit $kBundleMaxMiB MiB; commit $commit, sm_$arch)"
log "libraries carried: ${!bundled[*]}"
if ((llama_bytes > 0)); then log "llama.cpp CUDA tools: $out/llama-cuda.tar.xz, $(numfmt --to=iec-i --suffix=B "$llama_bytes")"; fi
if ((with_model)); then log "model: $(ls "$out"/model.part* | wc -l) part(s), $(numfmt --to=iec-i --suffix=B "$budget") of payload per call at most"; fi
log "device calls: $n_calls (see $out/CALLS.md); built in ${t_build} s, total $((SECONDS - t0)) s"
