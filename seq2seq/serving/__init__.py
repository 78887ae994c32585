"""The translation service's parts that need no trained run: the batcher that gathers requests
(with its bounded queue), what the service can take on (`capacity`: the timed batch, the queue's
bound, a request's estimated cost, the compiled programs kept), the service's metrics in the
Prometheus text format, and the OpenNMT-py REST format. `seq2seq.serve` assembles them around a run.

Imports only the standard library."""
