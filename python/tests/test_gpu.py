"""The Python module on a GPU: forward and generate against a parity fixture (docs/fixtures.md).

Skips, saying why, without a GPU, torch or safetensors. TILEPLAN_FIXTURE names the fixture
directory (default tests/data/qwen3-tiny); TILEPLAN_VERIFY_LOGITS, when set, is the .npy that
`verify_model --backend gpu --logits_out` wrote for that fixture, which forward must equal.
"""
import os

import numpy as np
import pytest

import tileplan

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="the GPU tests need safetensors")
pytestmark = pytest.mark.skipif(
    tileplan.device_count() == 0 or not torch.cuda.is_available(),
    reason="needs a CUDA GPU (tileplan.device_count() is 0 here)",
)

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.environ.get(
    "TILEPLAN_FIXTURE", os.path.join(HERE, "..", "..", "tests", "data", "qwen3-tiny"))


def relative(ours, ref):
    return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))


@pytest.fixture(scope="module")
def reference():
    return safetensors_numpy.load_file(os.path.join(FIXTURE, "reference.safetensors"))


@pytest.fixture(scope="module")
def model(reference):
    t = len(reference["input_ids"])
    n = len(reference["greedy_tokens"])
    # The plan verify_model --backend gpu makes: one prefill phase of the prompt, batch 1.
    return tileplan.Model.from_pretrained(FIXTURE, prefill=[t], decode=[t + n], max_context=t + n)


def test_forward_passes_the_fixture(model, reference):
    ids = torch.from_numpy(reference["input_ids"]).cuda()
    logits = model.forward(ids)
    assert logits.is_cuda and logits.dtype == torch.float32
    assert tuple(logits.shape) == (1, len(ids), model.vocab_size)
    ref = reference["logits"]
    # docs/fixtures.md's bf16 rule, as verify_model applies it.
    spread = reference.get("bf16_relative")
    limit = max(1e-2, 2.0 * float(spread[0])) if spread is not None else 5e-2
    got = relative(logits[0].cpu().numpy(), ref)
    print(f"forward: relative {got:.4g} (limit {limit:.3g})")
    assert got <= limit
    saved = os.environ.get("TILEPLAN_VERIFY_LOGITS")
    if saved:
        theirs = np.load(saved)
        diff = float(np.max(np.abs(logits[0].cpu().numpy() - theirs)))
        print(f"forward vs verify_model --logits_out: max |diff| = {diff}")
        assert diff == 0.0


def test_host_and_device_arrays_agree(model, reference):
    ids = reference["input_ids"]
    on_host = model.forward(ids)  # numpy in, numpy out
    assert isinstance(on_host, np.ndarray) and on_host.dtype == np.float32
    on_device = model.forward(torch.from_numpy(ids).cuda()).cpu().numpy()
    assert np.array_equal(on_host, on_device)


def test_generate_matches_the_reference(model, reference):
    ids = torch.from_numpy(reference["input_ids"]).cuda()
    n = len(reference["greedy_tokens"])
    out = model.generate(ids, n)
    assert out.is_cuda and tuple(out.shape) == (1, n)
    assert out[0].cpu().tolist() == reference["greedy_tokens"].tolist()
    assert model.generate(reference["input_ids"], n)[0].tolist() == out[0].cpu().tolist()


def test_runs_on_the_callers_stream(model, reference):
    ids = torch.from_numpy(reference["input_ids"]).cuda()
    default = model.forward(ids)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        ids_side = ids.clone()
        theirs = model.forward(ids_side, sync=False)
        model.synchronize(side.cuda_stream)
    assert torch.equal(default, theirs)


def test_a_token_outside_the_vocabulary_raises(model, reference):
    ids = torch.from_numpy(reference["input_ids"]).cuda()
    ids[1] = model.vocab_size + 5
    with pytest.raises(tileplan.Error) as e:
        model.forward(ids)
    assert e.value.code == 3 and "outside the vocabulary" in e.value.message
    model.forward(torch.from_numpy(reference["input_ids"]).cuda())  # still usable after


def test_wrong_arguments_are_refused(model, reference):
    with pytest.raises(tileplan.Error) as e:
        model.forward(np.zeros((1, 10_000), dtype=np.int32))  # no bucket holds it
    assert e.value.code == 3 and "no prefill bucket" in e.value.message
    with pytest.raises(tileplan.Error):
        model.generate(reference["input_ids"], model.max_context + 1)
