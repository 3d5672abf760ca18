"""Question sets (SQuAD, JSONL; BEIR queries and qrels) and answer scoring, shared by evaluation and fine-tuning."""
