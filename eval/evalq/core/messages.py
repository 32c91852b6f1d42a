"""The console's two channels, for the parts that may not print (only the app prints).

Progress lines (``[evalq] reference fp32: inprocess``) go to the logger of the module that
writes them (``logging.getLogger(__name__)``, under ``evalq``) and show on stderr; the
result text of a command that streams it (``evalq parity``'s lines, ``evalq load``'s
table) goes to :data:`output` and shows on stdout. Each record is one message worded for
the console. The app installs the handler that writes both (``evalq.app.console``); a
program using the library without it gets ordinary logging records.
"""

from __future__ import annotations

import logging

OUTPUT_NAME = "evalq.output"
output = logging.getLogger(OUTPUT_NAME)
