"""The conversation: the record of a run's messages (`record`), what each model request carries
(`parts`, `tail`), the model's window and the compaction of its view (`window`, `compaction`)."""
