"""The Python module's CPU parts: planning, reading the plan, errors (no GPU needed)."""
import json
import os

import pytest

import tileplan

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "..", "tests", "data", "qwen3-tiny")


@pytest.fixture(scope="module")
def q06():
    return tileplan.plan("qwen3-0.6b", target="h200", prefill=[16, 64], decode=[256])


def test_version():
    assert tileplan.__version__.count(".") == 2
    assert tileplan.api_version >= 1


def test_phases_and_steps(q06):
    assert [p.name for p in q06.phases] == ["prefill T=16", "prefill T=64", "decode B=1"]
    assert [p.kind for p in q06.phases] == ["prefill", "prefill", "decode"]
    assert q06.format_version == 1
    decode = q06.phases[-1]
    # The launches and estimates the C API reports are the steps' sums.
    assert q06.launches_per_decode_step == decode.launches
    assert decode.launches == sum(s.launches for s in decode.steps) > 0
    assert decode.est_us == pytest.approx(sum(s.est_us for s in decode.steps), rel=1e-6)
    assert q06.steps == [s for p in q06.phases for s in p.steps]
    launched = [s for s in decode.steps if s.launches > 0]
    assert launched and all(s.family and s.est_us > 0 and s.bytes > 0 for s in launched)
    assert all(s.source in ("cost_model", "calibrated") and s.measured_us is None for s in launched)
    assert all(s.bound in ("memory", "math", "launch") for s in launched)
    assert any(len(s.fused_from) > 1 for s in decode.steps)  # fusion found by pattern
    assert any(s.kind == "attention" or "attention" in s.kind for s in decode.steps)
    assert all(isinstance(v, int) for s in launched for v in s.tactic.values())


def test_serializations(q06):
    assert json.loads(q06.to_json()) == q06.data
    assert q06.data["model"] == "qwen3-0.6b"
    text = q06.to_text()
    assert "plan qwen3-0.6b on h200" in text
    assert f"launches per decode step: {q06.launches_per_decode_step}" in text
    assert q06.to_textproto().startswith("format_version: 1")
    binary = q06.to_binary()
    assert isinstance(binary, bytes) and binary[:2] == b"\x08\x01"  # field 1 (varint) = 1


def test_options_reach_the_planner():
    p = tileplan.plan("qwen3-0.6b", target="h200", prefill=[32], decode=[128], batch=4,
                      max_context=1000)
    assert [ph.name for ph in p.phases] == ["prefill T=32", "decode B=4"]
    assert int(p.data["options"]["max_context"]) == 1000
    assert int(p.data["options"]["prefill_batch"]) == 4


def test_tensor_parallel_rank():
    p = tileplan.plan("qwen2-7b", target="h200", prefill=[32], decode=[128], tp=2, rank=1)
    assert int(p.data["options"]["tensor_parallel_ranks"]) == 2
    assert int(p.data["options"]["tensor_parallel_rank"]) == 1
    decode = p.phases[-1]
    assert any(s.kind == "all_reduce" and s.family == "collective" for s in decode.steps)
    with pytest.raises(tileplan.Error, match="not a multiple of 3"):
        tileplan.plan("qwen2-7b", target="h200", prefill=[32], decode=[128], tp=3)


def test_checkpoint_directory():
    p = tileplan.plan(FIXTURE, target="h200", prefill=[8], decode=[16])
    assert [ph.name for ph in p.phases] == ["prefill T=8", "decode B=1"]


def test_errors_name_what_is_wrong():
    with pytest.raises(tileplan.Error) as e:
        tileplan.plan("no-such-model")
    assert e.value.code == 5  # NOT_FOUND
    assert "neither an existing path nor a bundled config" in str(e.value)
    with pytest.raises(tileplan.Error) as e:
        tileplan.plan("qwen3-0.6b", target="sm_7")
    assert e.value.code == 5 and "sm_7" in e.value.message
    with pytest.raises(tileplan.Error) as e:
        tileplan.plan("qwen3-0.6b", target="h200", prefill=[0])
    assert e.value.code == 3 and "prefill_tokens" in e.value.message
    with pytest.raises(tileplan.Error) as e:
        tileplan.plan("qwen3-0.6b", target="h200", freeze=True)
    assert "freeze needs" in e.value.message


@pytest.mark.skipif(tileplan.device_count() > 0, reason="this machine has a GPU")
def test_running_needs_a_gpu():
    with pytest.raises(tileplan.Error) as e:
        tileplan.Model.random("qwen3-0.6b", prefill=[16], decode=[64])
    assert e.value.code == 9 and "no CUDA device" in e.value.message  # FAILED_PRECONDITION


def test_plans_are_read_back(q06, tmp_path):
    for fmt, data in (("json", q06.to_json()), ("textproto", q06.to_textproto()),
                      ("binary", q06.to_binary())):
        back = tileplan.load_plan(data if fmt != "json" else data.encode(), format=fmt)
        assert back.data == q06.data
        assert back.to_binary() == q06.to_binary()
    path = tmp_path / "plan.binpb"
    path.write_bytes(q06.to_binary())
    assert tileplan.load_plan(path).data == q06.data
    (tmp_path / "plan.json").write_text(q06.to_json())
    assert tileplan.load_plan(str(tmp_path / "plan.json")).to_json() == q06.to_json()
    # The plan says whether prefill computes only the last token's logits.
    last = tileplan.plan("qwen3-0.6b", target="h200", prefill=[16], decode=[64],
                         prefill_last_token_logits=True)
    assert last.prefill_last_token_logits and not q06.prefill_last_token_logits
    assert tileplan.load_plan(last.to_binary(), format="binary").prefill_last_token_logits


def test_plans_that_cannot_be_read_back(q06, tmp_path):
    with pytest.raises(tileplan.Error) as e:
        tileplan.load_plan(q06.to_binary()[:100], format="binary")
    assert e.value.code == 3  # INVALID_ARGUMENT
    text = q06.to_textproto().replace("format_version: 1", "format_version: 2", 1)
    with pytest.raises(tileplan.Error) as e:
        tileplan.load_plan(text, format="textproto")
    assert e.value.code == 9 and "format_version 2" in e.value.message  # FAILED_PRECONDITION
    with pytest.raises(tileplan.Error, match="not a plan's JSON"):
        tileplan.load_plan(q06.to_textproto(), format="json")
    with pytest.raises(ValueError, match="read by its name"):
        tileplan.load_plan(str(tmp_path / "plan.txt"))
    with pytest.raises(ValueError, match="format must be one of"):
        tileplan.load_plan(b"", format="table")
