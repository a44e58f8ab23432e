"""Device strings, torch-free: `cpu`, `cpu:N`, `cpu:a-b` or `cpu:a,b` (an instance on those cores), `cuda:N`."""

from __future__ import annotations


def cpu_cores(spec: str) -> tuple[int, ...]:
    """The cores of a CPU device: `cpu` → () (no pinning), `cpu:2` → (2,), `cpu:0-3` → (0, 1, 2, 3), `cpu:0,2` → (0, 2).

    Raises ValueError naming the device for anything else (a GPU device, a bad number, a core named twice)."""
    kind, colon, index = spec.partition(":")
    if kind != "cpu":
        raise ValueError(f"{spec!r} is not a CPU device")
    if not colon:
        return ()
    cores: list[int] = []
    for part in index.split(","):
        first, dash, last = part.partition("-")
        if not (first.isdigit() and (not dash or last.isdigit())) or (dash and int(last) < int(first)):
            raise ValueError(f"device {spec!r}: cores are N, a-b (a <= b) or a list of them, such as cpu:0-3 or cpu:0,2")
        cores.extend(range(int(first), int(last if dash else first) + 1))
    if len(set(cores)) != len(cores):
        raise ValueError(f"device {spec!r} names a core twice")
    return tuple(cores)


def cpu_device(cores: tuple[int, ...]) -> str:
    """The CPU device of `cores` (ascending, distinct): `cpu:N`, `cpu:a-b` when consecutive, else `cpu:a,b,...`."""
    if len(cores) > 1 and cores == tuple(range(cores[0], cores[-1] + 1)):
        return f"cpu:{cores[0]}-{cores[-1]}"
    return f"cpu:{','.join(map(str, cores))}"


def split_devices(text: str) -> tuple[str, ...]:
    """A comma-separated device list: `cpu:0,cpu:1` → two devices, `cpu:0,1,cpu:2-3` → (`cpu:0,1`, `cpu:2-3`): an item
    that is only core numbers continues the CPU device before it."""
    devices: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item[0].isdigit() and devices and devices[-1].startswith("cpu:"):
            devices[-1] += f",{item}"
        else:
            devices.append(item)
    return tuple(devices)


def device_units(devices: tuple[str, ...]) -> int:
    """How many devices `devices` are for a per-device figure: a multi-core CPU device counts each of its cores."""
    return sum(max(len(cpu_cores(d)), 1) if d.startswith("cpu") else 1 for d in devices)
