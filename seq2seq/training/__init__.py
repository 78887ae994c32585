"""Training: the objective and its loss terms, the training softmax, the train state and the
pure steps, the optimisers and schedules, early stopping and the metric writer.

Imports only the folders below it (`common`, `data`, `model`)."""
