"""WordNet's noun records read straight from data.noun against nltk's ``all_synsets("n")``.

    .venv/bin/python benchmarks/bench_wordnet.py --nltk-data results/wordnet/nltk_data --json

Why it is kept: ``imagenot.core.wordnet.noun_records`` is hand-written where nltk already reads the
file; it pays only while it is much faster than nltk for the same records (the lemma table of
``imagenot lemmas`` and of the candidates step, the count of ``imagenot prepare-wordnet``), and
this benchmark checks both that and that the records are the same. CPU seconds of one pass each,
best of ``--repeat``; nltk's pass runs on a fresh reader each time (it caches the synsets it
builds).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings

from imagenot.core.wordnet import load_wordnet, noun_records, prepare_nltk_wordnet, wnid


def _cpu(fn) -> tuple[float, object]:
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--nltk-data",
        default=None,
        help="a prepared NLTK_DATA (default: one "
        "prepared from the schema's WordNet source in a temporary folder)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", UserWarning)  # nltk: no multilingual WordNet
    with tempfile.TemporaryDirectory() as tmp:
        nltk_data = args.nltk_data or str(prepare_nltk_wordnet(tmp, None))
        ours, theirs = [], []
        for _ in range(args.repeat):
            load_wordnet.cache_clear()
            wn = load_wordnet(nltk_data)
            s, fast = _cpu(lambda wn=wn: list(noun_records(wn)))
            ours.append(s)
            s, slow = _cpu(lambda wn=wn: [(wnid(x), x.lemma_names()) for x in wn.all_synsets("n")])
            theirs.append(s)
        result = {
            "noun_synsets": len(fast),
            "same_records": fast == slow,
            "ours_cpu_s": round(min(ours), 3),
            "nltk_cpu_s": round(min(theirs), 3),
            "speedup": round(min(theirs) / min(ours), 1),
        }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0 if result["same_records"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
