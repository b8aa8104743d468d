"""One module per op: its float64 reference, inputs, byte counts, and fake/autograd registration."""
