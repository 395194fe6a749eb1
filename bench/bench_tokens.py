"""Token counting of huge texts: one encode of the whole text (the naive way,
and the service's before bounded counting) vs contextsvc's bounded count vs
the bounded estimate an append stores past its exact budget (what a request
pays now; the bounded count runs in a worker). Prints figures; asserts
nothing. No database needed.

    python bench/bench_tokens.py            # 30 MB texts, as in the attack
    BENCH_TOKENS_MB=8 python bench/bench_tokens.py

Texts: one unbroken word (byte-pair encoding's worst case: one pre-tokenised
piece of the whole length), and real agent text from the workloads folder (``CONTEXTSVC_SHARED``)
repeated to the size. Each case runs in a fresh process so that its peak RSS
growth (VmHWM) is its own; the naive one-word case takes minutes (it is what
a 30 MB append cost before), BENCH_TOKENS_NAIVE=0 skips the naive runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from common import (  # bench/ is sys.path[0] as a script
    ROOT,
    figure,
    huge_text,
    mb,
    proc_status,
    recording,
)

SIZE = int(float(os.environ.get("BENCH_TOKENS_MB", "30")) * 1_000_000)


def text_of(kind: str) -> str:
    return huge_text(kind, SIZE)


def run_case(kind: str, how: str) -> None:
    """In this (fresh) process: count, then print one JSON line of figures."""
    from contextsvc.engine.token_estimate import sampled_estimate
    from contextsvc.engine.tokens import approx_tokens, get_tokenizer

    tokenizer = get_tokenizer("tiktoken:cl100k_base")
    text = text_of(kind)
    tokenizer.count("warm up")
    try:  # reset the high-water mark: building the text must not count
        with open(f"/proc/{os.getpid()}/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass
    before = proc_status(os.getpid(), "VmRSS")
    start = time.perf_counter()
    if how == "naive":
        tokens = len(tokenizer.encoding.encode_ordinary(text))
    elif how == "estimate":
        tokens = sampled_estimate(text, tokenizer)
    else:
        tokens = tokenizer.count(text)
    seconds = time.perf_counter() - start
    growth = max(0, proc_status(os.getpid(), "VmHWM") - before)
    print(
        json.dumps(
            {"tokens": tokens, "seconds": seconds, "growth": growth, "chars_4": approx_tokens(text)}
        )
    )


def main() -> None:
    naive = os.environ.get("BENCH_TOKENS_NAIVE", "1") != "0"
    print(f"counting {mb(SIZE)} texts (cl100k), one process per case…", flush=True)
    results = {}
    for kind in ("one-word", "real text"):
        for how in ("estimate", "bounded", "naive") if naive else ("estimate", "bounded"):
            out = subprocess.run(
                [sys.executable, __file__, "--case", kind, how],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            figures = json.loads(out.stdout.strip().splitlines()[-1])
            results[kind, how] = figures
            figure(
                f"  {kind:9} {how:7}: {figures['seconds']:7.3f} s, {figures['tokens']:>10,} tokens "
                f"(chars/4 {figures['chars_4']:,}), peak RSS growth {mb(figures['growth'])}",
                flush=True,
            )
    for kind in ("one-word", "real text"):
        e, b = results[kind, "estimate"], results[kind, "bounded"]
        # What is stored either way is floored by chars/4 (estimate_text).
        stored = max(b["tokens"], b["chars_4"])
        figure(
            f"  {kind}, estimate vs bounded: the estimate is {b['seconds'] / e['seconds']:.0f}x faster than the bounded"
            f" count, {100 * (e['tokens'] - stored) / stored:+.1f} % of its stored count"
        )
    if naive:
        for kind in ("one-word", "real text"):
            e = results[kind, "estimate"]
            b, n = results[kind, "bounded"], results[kind, "naive"]
            same = (
                "identical count"
                if b["tokens"] == n["tokens"]
                else (f"count {100 * (b['tokens'] - n['tokens']) / n['tokens']:+.3f} %")
            )
            figure(
                f"  {kind}, bounded vs naive: bounded is {n['seconds'] / b['seconds']:.1f}x faster, {same};"
                f" the estimate {n['seconds'] / e['seconds']:.0f}x"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--case"]:
        sys.path.insert(0, str(ROOT))
        run_case(sys.argv[2], sys.argv[3])
    else:
        with recording(__file__):
            main()
