#!/usr/bin/env python3
"""Chapter 06's prompt sets for trained drafters (issue 63), composed from templates x subjects.

    python3 bench/06_speculative/make_prompts.py     # rewrites the two files beside this script

prompts_train.jsonl       300 chat instructions the drafters are trained on (`lio spec-data`,
                          scripts/make_medusa.sh): explanations, stories, lists, how-tos, code,
                          emails, summaries of a given short text, comparisons, poems.
prompts_eval_free.jsonl   40 free chat prompts for measuring them, held apart: none of their
                          templates (recipes, trip plans, dialogues, product copy, ...) and none
                          of their subjects occurs in the training set (checked below).

run.py's two prompts (GROUNDED: the cat paragraph to rewrite; FREE: the painting robot) stay the
benchmark's own grounded and free prompts; neither template nor subject is in the training set.
Deterministic (seeded): rerunning writes the same files.
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

TRAIN = {
    ("Explain {} to a high-school student in a few short paragraphs.", "Explain {} in simple terms, with an example.",
     "Give a short overview of {}."): [
        "photosynthesis", "how vaccines work", "inflation", "compound interest", "black holes",
        "plate tectonics", "the water cycle", "how a CPU cache works", "public-key cryptography",
        "the immune system", "supply and demand", "the greenhouse effect", "how GPS finds your position",
        "how an electric motor works", "DNA replication", "why the sky is blue", "how airplanes stay in the air",
        "what a neural network is", "the theory of evolution", "how batteries store energy",
    ],
    ("Write a short story about {}.", "Tell a bedtime story about {}.", "Write the opening scene of a story about {}."): [
        "a lighthouse keeper who finds a message in a bottle", "a lost dog finding its way home",
        "a young baker entering her first competition", "a retired astronaut planting a garden",
        "a dragon who is afraid of fire", "a detective solving a mystery in Venice",
        "a girl who discovers a hidden map in her grandmother's attic", "a talking tree in a city park",
        "two friends building a raft", "a clockmaker who can stop time", "a cat who becomes mayor of a village",
        "a boy who collects thunderstorms", "a musician who loses her voice", "the last bookshop in town",
        "a snowman that wants to see summer", "a pirate who hates the sea",
    ],
    ("List ten practical tips for {}.", "What are the five most important things to know about {}?",
     "Give me a checklist for {}."): [
        "saving money on groceries", "learning a new language", "sleeping better", "preparing for a job interview",
        "training for a first marathon", "keeping houseplants alive", "working from home", "studying for exams",
        "reducing stress", "writing clearly", "travelling on a budget", "staying focused while reading",
        "giving a good presentation", "eating more vegetables", "organizing a small kitchen",
    ],
    ("How do I {}? Give step-by-step instructions.", "Explain how to {}, for a complete beginner.",
     "What is the quickest way to {}?"): [
        "bake a loaf of bread", "change a bicycle tire", "set up a Python virtual environment", "write a cover letter",
        "plant tomatoes in pots", "make a budget spreadsheet", "clean a laptop keyboard", "brew pour-over coffee",
        "back up photos from my phone", "tie a bowline knot", "start a vegetable compost", "make a paper airplane",
        "create a strong password", "hang a picture frame straight", "make homemade pizza dough",
    ],
    ("Write a Python function that {}, with a short explanation.", "Write a JavaScript function that {}.",
     "Show me how to write a program that {}, and explain each line."): [
        "reverses a string", "checks whether a number is prime", "merges two sorted lists",
        "counts word frequencies in a text", "returns the n-th Fibonacci number", "removes duplicates from a list",
        "checks whether a string is a palindrome", "computes the average of a list of numbers",
        "finds the largest element in a list", "converts Celsius to Fahrenheit", "flattens a nested list",
        "validates an email address with a regular expression", "reads a CSV file and sums a column",
        "sorts a list of dictionaries by a key", "implements binary search",
    ],
    ("Write a polite email to {}.", "Draft a short, friendly message to {}.", "Write a formal letter to {}."): [
        "my landlord about a broken heater", "a colleague asking to move our meeting to Friday",
        "a customer apologizing for a late delivery", "my manager requesting a day off",
        "a professor asking for an extension on an essay", "a neighbour about a noisy party",
        "a hotel asking about early check-in", "a client following up on an unpaid invoice",
        "a friend thanking them for a birthday gift", "a team announcing a new project schedule",
        "a recruiter declining a job offer", "a school asking about enrolment dates",
    ],
    ("Summarize the following text in two sentences:\n\n{}", "What is the main point of this text?\n\n{}",
     "Give three bullet points summarizing this text:\n\n{}"): [
        "The town council met on Tuesday to discuss the new bicycle lanes. Several shop owners worried that "
        "removing parking spaces would hurt their business, while cyclists argued that safer streets would "
        "bring more customers. After a long debate, the council agreed to a six-month trial on Main Street.",
        "Honeybees communicate the location of flowers through a 'waggle dance'. The angle of the dance shows "
        "the direction relative to the sun, and its length tells the distance. Other bees watch the dance and "
        "then fly straight to the food source, often several kilometres away.",
        "The company reported higher sales this quarter, mostly thanks to its new line of electric scooters. "
        "However, rising battery costs reduced its profit margin. The chief executive said prices would stay "
        "the same for now, but that the firm was looking for cheaper suppliers.",
        "Marie spent the summer restoring an old sailing boat she had bought for almost nothing. She replaced "
        "the rotten planks, sewed new sails and repainted the hull blue. In September she finally took it out "
        "on the lake, and it did not leak a single drop.",
        "Researchers tracked the sleep of two hundred teenagers for a month. Those who used their phones in "
        "bed slept on average forty minutes less than those who left them in another room. The study suggests "
        "that simple habits can make a large difference to rest.",
        "The museum's new exhibition brings together maps from five centuries. Early maps show sea monsters and "
        "imaginary islands, while later ones become precise enough for navigation. Visitors can also try drawing "
        "their own map of the city using only a compass and a notebook.",
        "A storm knocked out power across the region on Sunday night. Repair crews worked through the night, and "
        "by Monday afternoon most homes had electricity again. The utility company advised residents to keep "
        "flashlights and spare batteries ready for the rest of the week.",
        "Learning to play the piano as an adult is slower than as a child, but adults have advantages too. They "
        "can practise more deliberately, understand music theory faster and choose pieces they truly enjoy. "
        "Teachers say motivation matters more than age.",
        "The city library has started lending tools as well as books. Members can borrow drills, ladders and "
        "sewing machines for up to a week. The programme has been so popular that the library plans to double "
        "its collection next year.",
        "Volcanic soil is often very fertile because it contains minerals released by weathered rock. Farmers "
        "near active volcanoes accept the risk of eruptions in exchange for rich harvests. Modern monitoring "
        "gives them earlier warnings than ever before.",
    ],
    ("What are the main differences between {}?", "Compare {} in a short table.", "Which should I learn about first: {}? Explain."): [
        "a virus and a bacterium", "weather and climate", "stocks and bonds", "RAM and storage",
        "a democracy and a monarchy", "tea and coffee", "lists and tuples in Python", "renting and buying a home",
        "alligators and crocodiles", "TCP and UDP", "baking soda and baking powder", "a lake and a pond",
    ],
    ("Write a short poem about {}.", "Write a rhyming poem for children about {}.", "Describe {} in vivid, poetic prose."): [
        "the ocean at night", "autumn leaves", "a busy train station", "the first snow of winter", "an old bicycle",
        "a quiet library", "the moon over a city", "morning coffee", "a mountain trail", "rain on a window",
    ],
}

# Templates and subjects that occur nowhere in TRAIN.
EVAL_FREE = {
    "Give me a simple recipe for {}.": ["vegetable curry", "banana pancakes", "lentil soup", "lemon cookies"],
    "Plan a three-day trip to {} for a first-time visitor.": ["Lisbon", "Kyoto", "Montreal", "Edinburgh"],
    "Write a dialogue between {}.": ["a chess coach and a nervous student", "a chef and a food critic",
                                      "a ship captain and a young sailor", "two aliens visiting a supermarket"],
    "Write a product description for {}.": ["a solar-powered backpack", "a self-watering flower pot",
                                             "noise-cancelling headphones for children", "a foldable electric kettle"],
    "Describe a typical day in the life of {}.": ["a beekeeper", "an air traffic controller", "a museum curator",
                                                   "a deep-sea diver"],
    "What would happen if {}?": ["the Moon were twice as close to Earth", "humans could breathe underwater",
                                 "every car in a city were electric", "nobody needed to sleep"],
    "Give the arguments for and against {}.": ["a four-day working week", "school uniforms",
                                               "banning single-use plastic", "learning Latin at school"],
    "Write a motivational speech for {}.": ["a youth football team before a final", "volunteers cleaning a beach",
                                             "students on their first day of university", "a small bakery's staff"],
    "Tell me the history of {} in a few paragraphs.": ["the printing press", "chocolate", "the bicycle",
                                                       "the Olympic Games"],
    "Suggest names and a short slogan for {}.": ["a vegan bakery", "a dog-walking service", "a board-game cafe",
                                                 "a recycling app"],
}


def chat(text):
    return {"messages": [{"role": "user", "content": text}]}


def main():
    rng = random.Random(63)
    train = [t.format(s) for templates, subjects in TRAIN.items() for t in templates for s in subjects]
    rng.shuffle(train)
    train = train[:300]
    free = [t.format(s) for t, subjects in EVAL_FREE.items() for s in subjects]
    # Held apart: no eval subject inside a training prompt, no template shared.
    for t, subjects in EVAL_FREE.items():
        assert all(t not in templates for templates in TRAIN)
        for s in subjects:
            assert not any(s.lower() in p.lower() for p in train), s
    for name, prompts in (("prompts_train.jsonl", train), ("prompts_eval_free.jsonl", free)):
        with open(os.path.join(HERE, name), "w") as f:
            for p in prompts:
                f.write(json.dumps(chat(p)) + "\n")
        print(f"{name}: {len(prompts)} prompts")


if __name__ == "__main__":
    main()
