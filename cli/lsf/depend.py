"""-w by job name, as LSF users write it: `done(prep)`, `ended("sweep*")`, `numdone(sweep, > 10)`,
`done(sweep[3])`, or a bare name.

XCE's conditions name jobs by id (xce/rules/dependency_conditions.py); bsub
turns each name into the ids of the submitter's jobs of that name when it
submits (`*` matches any text, as bjobs -J): a name several jobs share
becomes each of them (`done(prep)` -> `(done(12) && done(15))`, LSF's
meaning: all of them), a name no job has is refused, as LSF refuses it.
What the names stand for is fixed at submission (LSF reads them again as
jobs come and go). Pure: the jobs come through `ids_of`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

CALL = re.compile(r"""(?P<kind>done|exit|ended|started|num(?:done|exit|ended|start|run|pend))\s*\(\s*
                      (?P<ref>"[^"]*"|'[^']*'|[^,()"']+?)\s*(?P<rest>,[^()]*)?\)""", re.VERBOSE)
ID = re.compile(r"\d+(\[(\d+|\*)\])?")
BARE = re.compile(r"""\s*("[^"]*"|'[^']*'|[A-Za-z_][\w.\-*]*)\s*""")
KEYWORDS = frozenset({"and", "or", "not"})


class DependError(ValueError):
    pass


def has_names(expression: str) -> bool:
    return resolve(expression, lambda name: ["1"]) != expression


def resolve(expression: str, ids_of: Callable[[str], list[str]]) -> str:
    """`expression` with each job name replaced by the ids `ids_of(name)` gives (DependError: none)."""
    bare = BARE.fullmatch(expression)
    if bare and bare[1].strip("\"'") not in KEYWORDS and not ID.fullmatch(bare[1]):
        expression = f"done({bare[1]})"

    def replace(found: re.Match[str]) -> str:
        kind, ref, rest = found["kind"], found["ref"].strip().strip("\"'"), found["rest"] or ""
        if ID.fullmatch(ref):
            return found[0]
        name, index = ref, ""
        if ref.endswith("]") and "[" in ref:
            name, index = ref[:ref.rindex("[")], ref[ref.rindex("["):]
        ids = ids_of(name)
        if not ids:
            raise DependError(f"{ref}: No matching job found")
        if len(ids) > 1 and kind.startswith("num"):
            raise DependError(f"{kind}({ref}): {len(ids)} jobs are named {name!r}; name one array")
        calls = [f"{kind}({job_id}{index}{rest})" for job_id in ids]
        return calls[0] if len(calls) == 1 else "(" + " && ".join(calls) + ")"

    return CALL.sub(replace, expression)
