"""``python -m verispec.spec.external``: serve the wire protocol on stdin/stdout (see :mod:`.server`)."""

import sys

from verispec.spec.external.server import main

sys.exit(main())
