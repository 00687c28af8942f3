"""LSF's query commands read their letters as getopt does: `-aJ name` is `-a -J name`, `-uall` is
`-u all`. Words of several letters that are options of their own (`-noheader`, `-json`) are kept."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def expand(words: Sequence[str], flags: str, with_value: str, whole: Iterable[str] = ()) -> list[str]:
    """`words` with bundled single-letter options split; `flags` take no value, `with_value` take one
    (the rest of the word, else the next word). Any other word is left for the parser to judge."""
    kept = set(whole)
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            out.extend(words[i - 1:])
            break
        if not word.startswith("-") or len(word) <= 2 or word in kept or word[1] not in flags + with_value:
            out.append(word)
            continue
        letters = word[1:]
        split: list[str] = []
        for position, letter in enumerate(letters):
            if letter in with_value:
                split.append(f"-{letter}")
                rest = letters[position + 1:]
                if rest:
                    split.append(rest)
                elif i < len(words):
                    split.append(words[i])
                    i += 1
                break
            if letter not in flags:
                split = [word]  # not getopt's: the parser says what is wrong with it
                break
            split.append(f"-{letter}")
        out.extend(split)
    return out
