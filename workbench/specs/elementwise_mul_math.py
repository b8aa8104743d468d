"""elementwise_mul's math (its declaration: elementwise_mul.py): y = a * b."""

def reference(a, b):
    return a.double() * b.double()


def eager(a, b):
    return a * b
