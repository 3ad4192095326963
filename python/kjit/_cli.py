"""The ``kjit`` command of the installed wheel (pyproject.toml, ``[project.scripts]``).

The command is the C++ program in ``kjit/bin/kjit`` (cli/, docs/cli.md), which finds
``libkjit.so.0`` beside this package. A wheel can put only this small script on ``PATH``, so it
replaces itself with that program, arguments, exit status and signals passing straight through.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Runs ``kjit/bin/kjit`` with this command's arguments; returns only if it cannot."""
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "kjit")
    if not os.access(binary, os.X_OK):
        sys.exit(f"kjit: {binary} is missing or not executable: this installation of the kjit "
                 "package has no command (reinstall the wheel, or build with KJIT_BUILD_CLI=ON)")
    # The NVRTC and nvJitLink the package itself would use (the nvidia-cuda-nvrtc and
    # nvidia-nvjitlink wheels in this environment, through $KJIT_LIBNVRTC and $KJIT_LIBNVJITLINK),
    # so that `kjit compile` and kjit.compile compile and link with the same ones.
    from . import _nvrtc_from_wheel
    _nvrtc_from_wheel()
    try:
        os.execv(binary, ["kjit", *sys.argv[1:]])
    except OSError as e:
        sys.exit(f"kjit: cannot run {binary}: {e.strerror}")


if __name__ == "__main__":
    main()
