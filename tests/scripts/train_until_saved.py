"""Run by tests/training/test_run.py: `grpo-tools train` as a user runs it, except that once the checkpoint of step STEP
is saved (every callback's `on_save` done), the process writes MARKER and waits, making no further step, until it is
killed. The test then kills it at a step it knows, however fast the machine trains.

    python tests/scripts/train_until_saved.py STEP MARKER train --config RECIPE
"""

import sys
import threading
from pathlib import Path

from transformers.trainer_callback import CallbackHandler

from grpo_tools.cli import main


def hold_after_saving(step: int, marker: Path) -> None:
    on_save = CallbackHandler.on_save

    def on_save_then_hold(self, args, state, control, **kwargs):
        control = on_save(self, args, state, control, **kwargs)
        if state.global_step == step:
            marker.write_text(str(step))
            threading.Event().wait()  # no further step: the test kills the process here
        return control

    CallbackHandler.on_save = on_save_then_hold


if __name__ == "__main__":
    hold_after_saving(int(sys.argv[1]), Path(sys.argv[2]))
    sys.exit(main(sys.argv[3:]))
