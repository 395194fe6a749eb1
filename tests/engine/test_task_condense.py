"""A task too big to pin verbatim keeps every identifier it names (engine.task_condense).

The first user message of an agent is often a long worked demonstration plus
the task. Cut to its head and tail it lost the paths and names only its middle
named; condensed, it keeps a line for each of them within the same budget.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.output_fit import head_tail_view
from contextsvc.engine.task_condense import GAP, condense_task, task_identifiers
from contextsvc.engine.tokens import approx_tokens

HEAD = "Here is a demonstration of how to fix an issue; your own task follows it."
TAIL = "Now fix the issue in src/portalocker/utils.py and run tests/test_lock.py."
PROSE = "the agent looked at the output and decided what to do next with care"
MIDDLE = (
    "Installing collected packages: marshmallow-3.13.0-0.editable-py3-none-any.whl",
    "[File: /marshmallow-code__marshmallow/reproduce.py (9 lines total)]",
    "self.value_field._bind_to_schema(field_name, self)",
    'raise ValueError("precision must be seconds")',
    "see line 1474 of fields.py",
    "Credentials live in Vaultwarden.",
)


def demonstration(filler: int = 400) -> str:
    """A head, prose filler with a few identifier lines in the middle, a tail."""
    body = [f"{PROSE} again and again" for _ in range(filler)]
    step = filler // (len(MIDDLE) + 1)
    for k, line in enumerate(MIDDLE, start=1):
        body.insert(k * step + k - 1, line)
    return "\n".join([HEAD, *body, TAIL])


def words(text: str) -> set[str]:
    return set(re.findall(r"\S+", text))


def test_the_middle_identifiers_survive_where_a_head_and_tail_cut_loses_them():
    task = demonstration()
    budget = approx_tokens(task) // 3
    cut = head_tail_view(task, None, budget, approx_tokens)
    condensed = condense_task(task, budget, approx_tokens)
    assert cut is not None and condensed is not None
    names = [
        "marshmallow-3.13.0-0.editable-py3-none-any.whl",
        "/marshmallow-code__marshmallow/reproduce.py",
        "self.value_field._bind_to_schema",
        "precision must be seconds",
        "1474",
        "Vaultwarden",  # a long plain word: kept after every identifier
    ]
    assert any(n not in cut for n in names)  # what the old cut lost
    for n in names:
        assert n in condensed, n
    # Kept lines are the task's own lines, whole, in its order; gaps are marked.
    lines = condensed.split("\n")
    assert lines[1] == HEAD and lines[-1] == TAIL
    kept = [line for line in lines[1:] if line != GAP]
    source = iter(task.split("\n"))
    assert all(line in source for line in kept)  # a subsequence of the task's lines
    assert GAP in lines and lines[0].startswith("[Condensed to fit the context window")
    assert approx_tokens(condensed) <= budget


def test_a_task_that_fits_is_left_alone_and_a_tiny_budget_gives_none():
    task = demonstration(20)
    assert condense_task(task, approx_tokens(task), approx_tokens) is None
    assert condense_task(task, 10, approx_tokens) is None  # not even the notice fits


def test_the_same_task_and_budget_give_the_same_text():
    # The pinned slot is in the cached prefix: a second compaction must not move it.
    task = demonstration()
    assert condense_task(task, 900, approx_tokens) == condense_task(task, 900, approx_tokens)


def test_one_huge_line_is_split_at_spaces_and_its_names_kept():
    prose = " ".join([PROSE] * 300)
    task = f"{prose} fix pkg/deep/module_name.py then {prose} run make check_all"
    assert "\n" not in task
    condensed = condense_task(task, approx_tokens(task) // 4, approx_tokens)
    assert condensed is not None
    assert "pkg/deep/module_name.py" in condensed and "check_all" in condensed
    assert approx_tokens(condensed) <= approx_tokens(task) // 4


def test_identifiers_are_ranked_most_specific_first():
    ids = task_identifiers(
        "see 123 and a.py then src/pkg/long_module_name.py and is_ok() in Production"
    )
    assert ids[0] == "src/pkg/long_module_name.py"
    assert ids.index("is_ok") < ids.index("123")
    assert ids[-1] == "production"  # long plain words come after every identifier
    assert "see" not in ids and "then" not in ids  # short prose words are not identifiers


_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=8)
_IDENT = st.one_of(
    st.builds(lambda a, b, c: f"{a}/{b}/{c}.py", _SEGMENT, _SEGMENT, _SEGMENT),
    st.builds(lambda a, b: f"{a}_{b}", _SEGMENT, _SEGMENT),
    st.builds(lambda a, b: f"{a}.{b}", _SEGMENT, _SEGMENT),
    st.integers(min_value=100, max_value=99_999).map(str),
)


@settings(max_examples=60, deadline=None)
@given(
    idents=st.lists(_IDENT, min_size=1, max_size=12, unique=True),
    filler=st.integers(min_value=40, max_value=400),
    spots=st.lists(st.integers(min_value=0, max_value=10_000), min_size=12, max_size=12),
    slack=st.floats(min_value=0.0, max_value=1.0),
)
def test_every_identifier_survives_and_the_result_fits_its_budget(idents, filler, spots, slack):
    body = [f"{PROSE} number {k:02d}"[:70] for k in range(filler)]
    for ident, spot in zip(idents, spots, strict=False):
        body.insert(spot % (len(body) + 1), f"uses {ident} here")
    task = "\n".join(["Fix the issue described below.", *body, "Then run the tests."])
    total = approx_tokens(task)
    # Enough room for the notice, the opening and closing cores and every
    # identifier line (each with its gap marker), and anything up to the task.
    need = 60 + 3 * sum(approx_tokens(f"uses {i} here\n{GAP}\n") for i in idents)
    budget = int(need + slack * max(0, total - 1 - need))
    condensed = condense_task(task, budget, approx_tokens)
    if budget >= total:
        assert condensed is None
        return
    assert condensed is not None
    assert approx_tokens(condensed) <= budget
    kept = words(condensed)
    for ident in idents:
        assert ident in kept, ident
