"""Links a distribution installed here, and those it requires, into a fresh venv's site-packages, so that pip counts
them installed there instead of downloading and unpacking them again. What the venv has already stays its own.

    python3 .ci/link_dists.py torch VENV_SITE_PACKAGES
"""

import importlib.metadata as md
import os
import re
import sys


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def link(name: str, site: str, seen: set[str]) -> None:
    dist = md.distribution(name)
    key = _key(dist.metadata["Name"])
    if key in seen:
        return
    seen.add(key)
    base = dist.locate_file("")
    for top in sorted({str(f).split("/")[0] for f in dist.files or () if not str(f).startswith("..")}):
        target = os.path.join(site, top)
        if not os.path.exists(target):
            os.symlink(os.path.join(base, top), target)
    for req in dist.requires or ():
        if "extra ==" not in req:
            link(re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0], site, seen)


if __name__ == "__main__":
    own = {_key(d.rsplit("-", 1)[0]) for d in os.listdir(sys.argv[2]) if d.endswith(".dist-info")}
    link(sys.argv[1], sys.argv[2], own)
