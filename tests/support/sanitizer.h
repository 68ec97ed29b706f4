// sanitizer.h — which sanitizer this test binary was built with, for the few tests that size
// their work to the build (a case that takes seconds in Release and minutes under ASan runs in
// the Release build only, where a test elsewhere reaches the same code under ASan).
//
// GCC defines __SANITIZE_ADDRESS__ under -fsanitize=address; Clang (the asan preset's compiler)
// answers __has_feature(address_sanitizer) instead. Read both here, once.
#pragma once

namespace lio::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace lio::test
