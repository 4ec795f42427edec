"""Publishing to the Hugging Face Hub: staging and pushing a run, and its model card."""
