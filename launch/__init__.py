"""How a run is started and recorded. Never imports torch or TensorFlow."""
