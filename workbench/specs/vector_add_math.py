"""vector_add's math (its declaration: vector_add.py): c = a + b."""

def reference(a, b):
    return a.double() + b.double()


def eager(a, b):
    return a + b
