"""pytorch/tutorials at toy size, each written twice: the tutorial's own loop and a port to a `Module`.

One module per tutorial (`quickstart` (also optimization_tutorial), `nn_tutorial`, `char_rnn`
(classification and generation, as they were), `char_rnn_batches` (classification as it is
now), `seq2seq`, `transformer`, `amp_recipe`, `nlp` (the LSTM tagger and the N-gram model),
`polynomial` (the examples_nn scripts)) holds the model (a
`trainer.Module`, so one class serves both runs; the tutorial's loop uses it as a plain
`nn.Module`) and the tutorial's loop as written: its optimizer, the place of its
`zero_grad`, its per-sample loops and hand-written updates, its evaluation, its random draws
(Python's `random` included), the numbers it prints. tests/tutorials/test_<name>.py trains the
port with `Trainer(...)` on the same seed and data and compares the weights with `torch.equal`
and the printed numbers with `==`.

Data is synthetic and shaped like the tutorial's (FashionMNIST's images, names per language,
sentence pairs): nothing is downloaded. The Trainer options are those of the pytorch/examples
ports (`tests.helpers.examples.QUIET`).
"""
