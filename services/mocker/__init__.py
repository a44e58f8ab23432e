"""Mock instances: the worker protocol with real block accounting, timed by the fitted latency model."""
