"""The reference pipeline (what `make demo` runs): orders through ferrymq, Spark and a push
consumer. Start with `python -m examples.pipeline.run`."""
