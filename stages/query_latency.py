"""Stage query_latency (issue 14): how long the caller's question takes to embed under each encoder in
``bench.query_encoders`` (names of ``embed.encoders``; the first is the baseline), each loaded as the chain serves it
and alone in a fresh process (`rag.bench.latency.isolated_query_ms`), ``bench.query_rounds`` rounds in alternating
order, ``bench.query_passes`` passes over the clinic questions (``voice.queries``, the recogniser's text) per process.
Writes metrics/voice/query_latency.json: per encoder p50 / p95 ms and each round's p50; per encoder the median, min
and max over rounds of its p50 / the baseline's (the goal's reading). Wall-clock on this machine: quote ratios."""
from common import ROOT, VOICE_METRICS, main, params, params_error
from rag import config
from rag.bench.latency import isolated_query_ms
from rag.io import write_json
from rag.voice.queries import load_queries


def run():
    p = params()
    b = p["bench"]
    try:
        names = b["query_encoders"]
        if not isinstance(names, list) or not names or len(set(map(str, names))) != len(names):
            raise ValueError(f"bench.query_encoders must list distinct embed.encoders names, got {names!r}")
        rounds, passes = (config.number(p, "bench", key, int, at_least=1) for key in ("query_rounds", "query_passes"))
        encoders = {}
        for name in names:
            try:
                encoders[name] = config.encoder(p, ROOT, name)
            except ValueError as e:
                raise ValueError(f"bench.query_encoders: {e}") from None
    except KeyError as e:
        raise params_error(f"missing key bench.{e.args[0]}") from None
    except ValueError as e:
        raise params_error(str(e)) from None
    texts = [q["asr"] for q in load_queries(ROOT / p["voice"]["queries"])]
    result = isolated_query_ms(encoders, names[0], texts, rounds, passes)
    out = {"baseline": names[0], "texts": len(texts), "rounds": rounds, "passes": passes, "threads": 2, **result}
    write_json(VOICE_METRICS / "query_latency.json", out)
    for name, r in out["ratio_to_baseline"].items():
        print(f"query_latency: {name}: p50 {out['encoders'][name]['p50']} ms, {r['median']}x {names[0]} "
              f"(rounds {r['min']}-{r['max']})")


if __name__ == "__main__":   # each encoder runs in a spawned process, which imports this file
    main(run)
