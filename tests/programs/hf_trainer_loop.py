"""A Hugging Face Trainer program, as a user writes one: a small GPT-2 built from its config (no
download), random tokens, TrainingArguments with gradient accumulation; under torchrun the
Trainer runs DDP over every process. A TrainerCallback times each optimizer step with the
program's own clock and writes those times to own-times-rank<RANK>.json, as ddp_loop.py does.

Usage: python hf_trainer_loop.py [--steps N] [--accumulate K] [--sleep S] [--layers L]
    [--width W] [--bf16]
"""

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12, help="optimizer steps")
parser.add_argument("--accumulate", type=int, default=4, help="micro-batches per optimizer step")
parser.add_argument("--sleep", type=float, default=0.0, help="extra seconds per micro-batch")
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--seq-len", type=int, default=64)
parser.add_argument("--batch", type=int, default=4, help="sequences per micro-batch")
parser.add_argument("--bf16", action="store_true")
args = parser.parse_args()


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        seeded = torch.Generator().manual_seed(index)
        ids = torch.randint(0, 1000, (args.seq_len,), generator=seeded)
        return {"input_ids": ids, "labels": ids}


class Slow(GPT2LMHeadModel):
    def forward(self, *a: object, **k: object) -> object:
        time.sleep(args.sleep)
        return super().forward(*a, **k)


class OwnClock(TrainerCallback):
    """Each optimizer step's time by the program's own clock: one step's end to the next's."""

    def __init__(self) -> None:
        self.last = 0.0
        self.times: list[float] = []

    def on_train_begin(self, *_: object, **__: object) -> None:
        self.last = time.perf_counter()

    def on_step_end(self, *_: object, **__: object) -> None:
        now = time.perf_counter()
        self.times.append(now - self.last)
        self.last = now


torch.manual_seed(0)
config = GPT2Config(
    n_layer=args.layers,
    n_embd=args.width,
    n_head=4,
    vocab_size=1000,
    n_positions=args.seq_len,
    bos_token_id=0,
    eos_token_id=0,
)
clock = OwnClock()
training = TrainingArguments(
    output_dir="hf-out",
    max_steps=args.steps,
    per_device_train_batch_size=args.batch,
    gradient_accumulation_steps=args.accumulate,
    learning_rate=1e-3,
    bf16=args.bf16,
    use_cpu=not torch.cuda.is_available(),
    report_to=[],
    save_strategy="no",
    logging_strategy="no",
    disable_tqdm=True,
    dataloader_num_workers=0,
    ddp_find_unused_parameters=False,
    remove_unused_columns=False,  # Slow.forward takes **kwargs: keep input_ids and labels
    ddp_backend=None if torch.cuda.is_available() else "gloo",
)
trainer = Trainer(model=Slow(config), args=training, train_dataset=Tokens(), callbacks=[clock])
trainer.train()
Path(f"own-times-rank{trainer.args.process_index}.json").write_text(json.dumps(clock.times))
