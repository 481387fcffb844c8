"""The targeted reader returns exactly what prometheus_client's full parser finds for the same names."""

from __future__ import annotations

import math
import random
from collections.abc import Collection

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.promtext_bench import GATEWAY_WANTED, vllm_metrics_body
from common.promtext import FamilyReader, PromTextError, Sample, parse_families

Comparable = list[tuple[tuple[tuple[str, str], ...], float | str, float | None]]


def _norm(samples: list[Sample] | list[tuple[dict[str, str], float, float | None]]) -> Comparable:
    out: Comparable = []
    for labels, value, ts in samples:
        v: float | str = "nan" if math.isnan(value) else float(value)
        out.append((tuple(sorted(labels.items())), v, None if ts is None else float(ts)))
    return out


def _reference(text: str, wanted: Collection[str]) -> dict[str, Comparable]:
    found: dict[str, list[tuple[dict[str, str], float, float | None]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in wanted:
                ts = None if s.timestamp is None else float(s.timestamp)
                found.setdefault(s.name, []).append((s.labels, s.value, ts))
    return {name: _norm(samples) for name, samples in found.items()}


def _ours(body: bytes | str, wanted: Collection[str]) -> dict[str, Comparable]:
    return {name: _norm(samples) for name, samples in parse_families(body, wanted).items()}


def _all_sample_names(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


# --- realistic vLLM bodies -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"models": ["a", "b"], "engines": 2, "seed": 3},
        {"legacy_cache_gauge": True, "running_adapters": "", "waiting_adapters": "x,y", "seed": 7},
    ],
)
def test_gateway_families_of_a_vllm_body_equal_the_full_parse(kwargs: dict[str, object]) -> None:
    body = vllm_metrics_body(**kwargs)  # type: ignore[arg-type]
    assert len(body) > 30_000
    assert _ours(body, GATEWAY_WANTED) == _reference(body.decode(), GATEWAY_WANTED)


def test_every_name_in_a_vllm_body_reads_like_the_full_parse() -> None:
    body = vllm_metrics_body(models=["m1", "m2"], seed=11)
    text = body.decode()
    rng = random.Random(5)
    names = sorted(_all_sample_names(text))
    for _ in range(30):
        wanted = set(rng.sample(names, k=rng.randint(1, 10)))
        assert _ours(body, wanted) == _reference(text, wanted)
    # histogram parts, counters and gauges all at once, from str input as well as bytes
    assert _ours(text, names) == _reference(text, names)


# --- randomly generated bodies with every syntax feature -------------------------------------

_TRICKY = ['"', "\\", "\n", ",", "}", "{", "=", " ", "#", "é", "a,b", "\\n", "😀", " # "]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _random_value(rng: random.Random) -> str:
    return rng.choice(
        [
            "NaN",
            "+Inf",
            "-Inf",
            "0",
            "1",
            "-3.5",
            "1e-07",
            "2.5E+10",
            str(rng.random()),
            str(rng.randint(0, 10**9)),
        ]
    )


def _random_body(rng: random.Random) -> tuple[str, list[str]]:
    lines: list[str] = []
    names: list[str] = []
    for f in range(rng.randint(1, 8)):
        base = rng.choice(["vllm:", "sglang:", "tgi_", "x_", ""]) + f"fam{f}"
        kind = rng.choice(["gauge", "untyped", "histogram", "bare"])
        if kind != "bare":
            lines.append(f"# HELP {base} help text with \\\\ and \\n escapes")
            lines.append(f"# TYPE {base} {kind}")
        suffixes = ["_bucket", "_sum", "_count"] if kind == "histogram" else [""]
        for _ in range(rng.randint(1, 4)):
            label_names = rng.sample(
                ["model_name", "engine", "le_", "a", "running_lora_adapters"], k=rng.randint(0, 3)
            )
            labels = {
                n: "".join(rng.choices([*_TRICKY, "v", "x1"], k=rng.randint(0, 4))) for n in label_names
            }
            for suffix in suffixes:
                lbl = dict(labels)
                if suffix == "_bucket":
                    lbl["le"] = rng.choice(["0.1", "1.0", "+Inf"])
                parts = [f'{k}="{_escape(v)}"' for k, v in lbl.items()]
                sep = rng.choice([",", ", "])
                block = (
                    "{" + sep.join(parts) + (rng.choice(["", ","]) if parts else "") + "}"
                    if lbl or rng.random() < 0.2
                    else ""
                )
                ts = f" {rng.randint(1, 2 * 10**12)}" if rng.random() < 0.3 else ""
                lines.append(
                    f"{base}{suffix}{block}{rng.choice([' ', '  ', chr(9)])}{_random_value(rng)}{ts}"
                )
                names.append(base + suffix)
        if rng.random() < 0.2:
            lines.append("")
    eol = rng.choice(["\n", "\r\n"])
    return eol.join(lines) + eol, sorted(set(names))


def test_random_bodies_with_escapes_specials_timestamps_and_crlf_match_the_full_parse() -> None:
    rng = random.Random(20240601)
    for _ in range(300):
        text, names = _random_body(rng)
        wanted = set(rng.sample(names, k=rng.randint(1, len(names)))) | {"absent_family"}
        assert _ours(text, wanted) == _reference(text, wanted), text
        assert _ours(text.encode(), wanted) == _reference(text, wanted), text


# --- explicit behaviours ---------------------------------------------------------------------


def test_label_escapes_nan_inf_and_timestamps() -> None:
    body = (
        '# TYPE m gauge\nm{a="q\\"uote",b="back\\\\slash",c="new\\nline",d="a,b}"} NaN 1700000000123\n'
        "m +Inf\nm -Inf 5\n"
    )
    got = parse_families(body, ["m"])["m"]
    assert got[0].labels == {"a": 'q"uote', "b": "back\\slash", "c": "new\nline", "d": "a,b}"}
    assert math.isnan(got[0].value) and got[0].timestamp == pytest.approx(1_700_000_000.123)
    assert got[1] == Sample({}, math.inf, None)
    assert got[2] == Sample({}, -math.inf, 0.005)


def test_missing_families_are_absent_and_prefixes_do_not_match() -> None:
    body = b'lat_bucket{le="1"} 3\nlat_sum 2\nlat_count 3\nlatency 9\n'
    assert parse_families(body, ["lat", "nope"]) == {}
    assert parse_families(body, ["latency", "lat_sum"]) == {
        "latency": [Sample({}, 9.0)],
        "lat_sum": [Sample({}, 2.0)],
    }


def test_crlf_first_line_and_no_trailing_newline() -> None:
    body = b'q{x="1"} 4\r\n# HELP q h\r\nq{x="2"} 5'
    assert parse_families(body, {"q"}) == {"q": [Sample({"x": "1"}, 4.0), Sample({"x": "2"}, 5.0)]}


def test_a_malformed_wanted_line_is_an_error_but_unwanted_garbage_is_ignored() -> None:
    assert parse_families(b"junk {{{ not prometheus\nok 1\n", ["ok"]) == {"ok": [Sample({}, 1.0)]}
    with pytest.raises(PromTextError, match="bad"):
        parse_families(b"ok one\n", ["ok"])
    with pytest.raises(PromTextError, match="labels"):
        parse_families(b'ok{a="unterminated} 1\n', ["ok"])
    with pytest.raises(PromTextError):
        parse_families(b"ok \n", ["ok"])


def test_reader_rejects_names_that_cannot_be_metric_names() -> None:
    with pytest.raises(ValueError):
        FamilyReader(["has space"])
    with pytest.raises(ValueError):
        FamilyReader([])
