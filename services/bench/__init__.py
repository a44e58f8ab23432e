"""`distserve bench`: load generator, rate sweep and goodput per device, measured and simulated."""
