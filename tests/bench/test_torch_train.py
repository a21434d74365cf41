"""bench.torch_train's loss: a plain model's logits, and inception_v3's (logits, aux_logits) in train mode."""

import collections

import pytest

torch = pytest.importorskip("torch")

from bench.torch_train import loss_of  # noqa: E402

# torchvision's own (torchvision.models.inception): a namedtuple
InceptionOutputs = collections.namedtuple("InceptionOutputs", ["logits", "aux_logits"])


def test_the_loss_weighs_the_aux_head_and_takes_a_plain_output_whole():
    criterion = torch.nn.CrossEntropyLoss()
    logits, aux, labels = torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 3.0]]), torch.tensor([0])
    plain = criterion(logits, labels)
    assert torch.equal(loss_of(logits, labels, criterion), plain)
    weighted = loss_of(InceptionOutputs(logits, aux), labels, criterion)
    assert torch.allclose(weighted, plain + 0.4 * criterion(aux, labels)) and weighted > plain
    # without the aux head (aux_logits=False) the logits alone: the namedtuple was handed to the loss whole
    assert torch.equal(loss_of(InceptionOutputs(logits, None), labels, criterion), plain)
