"""Question sets (SQuAD, JSONL) and answer scoring, shared by answer evaluation and QA fine-tuning."""
