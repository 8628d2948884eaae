"""The convergence suite's tasks: data, model, optimizer and schedule, all small enough for CPU ranks.

Each task is built from a seed: the seed fixes the data split (or the teacher), the initial weights
and the batch order, so the variants of one seed differ only in the gradient exchange.

    ts-sgdm, ts-nesterov  teacher-student regression: a fixed random tanh network (32-64-8) labels
                          Gaussian inputs (+ noise), a ReLU MLP 32-256-256-8 learns it; SGD momentum
                          0.9 (heavy ball or nesterov); test loss = MSE against the teacher's clean
                          outputs.
    digits-sgdm           scikit-learn's bundled 8x8 digits (1,797 images, no download), MLP
                          64-256-256-10, SGD momentum 0.9.
    cnn-sgdm              the same digits as 1x8x8 images, three 3x3 convolutions and two linear
                          layers, SGD momentum 0.9.
    cnn-aug-sgdm          the same CNN with random one-pixel shifts of the training images and weight
                          decay 5e-4; cnn-reg-sgdm adds label smoothing 0.1 to the training loss.
                          cnn-sgdm overfits (76 epochs, nothing against it), and its final test loss
                          rests on a few confidently wrong images: rounding alone moves it by up to
                          1.5x on one seed (bench/RESULTS.md).
    charlm-adamw          character-level transformer language model (2 layers, d=64, 4 heads,
                          context 32) on the license texts Debian ships in /usr/share/common-licenses
                          (package base-files, on every Debian system; the texts permit verbatim
                          copies, and nothing of them is stored in this repository); AdamW.

Schedules: linear warm-up then cosine decay to zero, the usual recipe; ``--constant-lr`` in
train.py keeps the peak rate for the whole run instead (an ablation in bench/RESULTS.md).
"""

import math
import os
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

Batch = Tuple[torch.Tensor, torch.Tensor]


@dataclass
class Task:
    name: str
    steps: int
    batch: int  # per rank
    lr: float
    warmup: int  # linear warm-up steps of the schedule
    classification: bool
    make_model: Callable[[], nn.Module]
    make_optimizer: Callable[[object], torch.optim.Optimizer]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    # batch(step, rank, world) -> this rank's batch of this step; the same for every variant
    batch_for: Callable[[int, int, int], Batch]
    test: Batch
    # the training loss where it differs from the test loss (label smoothing); None: ``loss``
    train_loss: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None

    def lr_at(self, step: int, constant: bool = False) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        if constant:
            return self.lr
        frac = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * 0.5 * (1.0 + math.cos(math.pi * frac))


def _sgd(lr: float, nesterov: bool = False, wd: float = 0.0):
    return lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=nesterov, weight_decay=wd)


# ---------------------------------------------------------------------------------------------
def teacher_student(seed: int, nesterov: bool, scale: float = 1.0, width: int = 256) -> Task:
    """Regression onto a fixed random tanh network. ``width``: the student's hidden width. At 2048
    (ts-wide-sgdm: 4.3M parameters, 4 samples per rank, 500 test samples) a step's compute is small
    against its 17 MB of fp32 gradients: communication-bound at 1 Gbit/s, for time-to-target."""
    wide = width != 256
    batch, n_test = (4, 500) if wide else (32, 2000)
    g = torch.Generator().manual_seed(10_000 + seed)
    d_in, d_h, d_out = 32, 64, 8
    w1 = torch.randn(d_in, d_h, generator=g) / math.sqrt(d_in)
    w2 = torch.randn(d_h, d_out, generator=g) / math.sqrt(d_h)

    def teacher(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ w1) @ w2

    x_test = torch.randn(n_test, d_in, generator=g)
    test = (x_test, teacher(x_test))

    def batch_for(step: int, rank: int, world: int) -> Batch:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 101 + rank)
        x = torch.randn(batch, d_in, generator=gen)
        return x, teacher(x) + 0.1 * torch.randn(batch, d_out, generator=gen)

    def make_model() -> nn.Module:
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(d_in, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                             nn.Linear(width, d_out))

    name = "ts-wide-sgdm" if wide else ("ts-nesterov" if nesterov else "ts-sgdm")
    lr = 0.1 * min(1.0, math.sqrt(256 / width))
    return Task(name, int(300 * scale), batch, lr, 10, False, make_model, _sgd(lr, nesterov), F.mse_loss, batch_for,
                test)


# ---------------------------------------------------------------------------------------------
def _digits(seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = d.data.astype(np.float32) / 16.0
    x_tr, x_te, y_tr, y_te = train_test_split(x, d.target, test_size=0.25, random_state=seed, stratify=d.target)
    mean, std = x_tr.mean(0), x_tr.std(0) + 1e-3
    return (torch.from_numpy((x_tr - mean) / std), torch.from_numpy(y_tr).long(),
            torch.from_numpy((x_te - mean) / std), torch.from_numpy(y_te).long())


def _epoch_batches(n: int, global_batch: int, seed: int):
    """batch_for over shuffled epochs: step s takes the s-th global batch, split over the ranks."""
    per_epoch = n // global_batch
    cache: Dict[int, torch.Tensor] = {}

    def indices(step: int, rank: int, world: int) -> torch.Tensor:
        epoch, s = divmod(step, per_epoch)
        if epoch not in cache:
            cache.clear()
            cache[epoch] = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 7919 + epoch))
        local = global_batch // world
        start = s * global_batch + rank * local
        return cache[epoch][start:start + local]

    return indices


def digits_mlp(seed: int, scale: float = 1.0) -> Task:
    x_tr, y_tr, x_te, y_te = _digits(seed)
    idx = _epoch_batches(len(x_tr), 64, seed)

    def make_model() -> nn.Module:
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

    def batch_for(step: int, rank: int, world: int) -> Batch:
        i = idx(step, rank, world)
        return x_tr[i], y_tr[i]

    return Task("digits-sgdm", int(400 * scale), 64, 0.05, 10, True, make_model, _sgd(0.05), F.cross_entropy,
                batch_for, (x_te, y_te))


class _Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 64, 3, padding=1)
        self.f1 = nn.Linear(64 * 2 * 2, 128)
        self.f2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(-1, 1, 8, 8)
        x = F.relu(self.c1(x))
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = F.max_pool2d(F.relu(self.c3(x)), 2)
        return self.f2(F.relu(self.f1(x.flatten(1))))


def _shifted(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Each 8x8 image moved by -1, 0 or +1 pixel in each direction (zeros, the mean, fill in)."""
    b = x.shape[0]
    padded = F.pad(x.view(b, 8, 8), (1, 1, 1, 1))
    dy, dx = torch.randint(0, 3, (2, b), generator=gen)
    return torch.stack([padded[k, dy[k]:dy[k] + 8, dx[k]:dx[k] + 8] for k in range(b)]).reshape(b, 64)


def digits_cnn(seed: int, scale: float = 1.0, name: str = "cnn-sgdm", wd: float = 0.0, shift: bool = False,
               smoothing: float = 0.0) -> Task:
    """``wd``: SGD's weight decay; ``shift``: random one-pixel shifts of the training images;
    ``smoothing``: label smoothing in the training loss (the test loss stays plain cross-entropy)."""
    x_tr, y_tr, x_te, y_te = _digits(seed)
    idx = _epoch_batches(len(x_tr), 64, seed)

    def make_model() -> nn.Module:
        torch.manual_seed(seed)
        return _Cnn()

    def batch_for(step: int, rank: int, world: int) -> Batch:
        i = idx(step, rank, world)
        if not shift:
            return x_tr[i], y_tr[i]
        gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 101 + rank)
        return _shifted(x_tr[i], gen), y_tr[i]

    smooth = (lambda out, y: F.cross_entropy(out, y, label_smoothing=smoothing)) if smoothing else None
    return Task(name, int(400 * scale), 64, 0.05, 10, True, make_model, _sgd(0.05, wd=wd), F.cross_entropy,
                batch_for, (x_te, y_te), smooth)


# ---------------------------------------------------------------------------------------------
LICENSE_DIR = "/usr/share/common-licenses"
LICENSE_FILES = ("GPL-3", "Apache-2.0", "MPL-2.0", "LGPL-2.1", "GFDL-1.3", "Artistic")
CONTEXT = 32


def license_text(directory: str = LICENSE_DIR) -> bytes:
    """The corpus: Debian's license texts (package base-files), concatenated in a fixed order."""
    parts = []
    for name in LICENSE_FILES:
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            raise SystemExit(f"charlm: {path} is missing (Debian's base-files package ships it)")
        with open(path, "rb") as f:
            parts.append(f.read())
    return b"\n".join(parts)


class _CharLM(nn.Module):
    def __init__(self, vocab: int, d: int = 64, layers: int = 2, heads: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(CONTEXT, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((CONTEXT, CONTEXT), float("-inf")), diagonal=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        h = self.embed(x) + self.pos(torch.arange(t, device=x.device))
        h = self.blocks(h, mask=self.mask[:t, :t])
        return self.head(self.norm(h))


def _lm_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def char_lm(seed: int, scale: float = 1.0, text: Optional[bytes] = None) -> Task:
    data = np.frombuffer(text if text is not None else license_text(), dtype=np.uint8)
    chars = np.unique(data)
    lookup = np.zeros(256, dtype=np.int64)
    lookup[chars] = np.arange(len(chars))
    tokens = torch.from_numpy(lookup[data])
    split = int(len(tokens) * 0.9)
    train, held = tokens[:split], tokens[split:]
    g = torch.Generator().manual_seed(20_000)
    starts = torch.randint(0, len(held) - CONTEXT - 1, (96,), generator=g)
    test = (torch.stack([held[s:s + CONTEXT] for s in starts]), torch.stack([held[s + 1:s + CONTEXT + 1] for s in starts]))

    def batch_for(step: int, rank: int, world: int) -> Batch:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 101 + rank)
        s = torch.randint(0, len(train) - CONTEXT - 1, (8,), generator=gen)
        return (torch.stack([train[i:i + CONTEXT] for i in s]), torch.stack([train[i + 1:i + CONTEXT + 1] for i in s]))

    def make_model() -> nn.Module:
        torch.manual_seed(seed)
        return _CharLM(len(chars))

    def make_optimizer(params):
        return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)

    return Task("charlm-adamw", int(300 * scale), 8, 3e-3, 20, False, make_model, make_optimizer, _lm_loss, batch_for,
                test)


TASKS = {
    "ts-sgdm": lambda seed, scale: teacher_student(seed, False, scale),
    "ts-nesterov": lambda seed, scale: teacher_student(seed, True, scale),
    "ts-wide-sgdm": lambda seed, scale: teacher_student(seed, False, scale, width=2048),
    "digits-sgdm": digits_mlp,
    "cnn-sgdm": digits_cnn,
    "cnn-wd-sgdm": lambda seed, scale: digits_cnn(seed, scale, "cnn-wd-sgdm", wd=5e-4),
    "cnn-aug-sgdm": lambda seed, scale: digits_cnn(seed, scale, "cnn-aug-sgdm", wd=5e-4, shift=True),
    "cnn-reg-sgdm": lambda seed, scale: digits_cnn(seed, scale, "cnn-reg-sgdm", wd=5e-4, shift=True, smoothing=0.1),
    "charlm-adamw": char_lm,
}
