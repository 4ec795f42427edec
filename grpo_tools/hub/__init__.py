"""Publishing to the Hugging Face Hub: staging a run, pushing it in one commit, and its model card."""

from grpo_tools.hub.card import model_card
from grpo_tools.hub.push import HubError, PushResult, push_run
from grpo_tools.hub.staging import stage_run


__all__ = ["HubError", "PushResult", "model_card", "push_run", "stage_run"]
