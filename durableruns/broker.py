"""The embedded default's broker: kombu's filesystem transport, with atomic writes.

kombu writes a message by creating its file under its final name, then writing into
it; a worker listing the folder in between takes the empty file, fails to decode it,
and Celery stops the whole worker ("Unrecoverable error: JSONDecodeError", kombu
issue #1551). Under load `make demo` lost its worker this way within minutes. Here a
message is written beside the folder's messages under a name no queue reads, then
renamed into place: a reader sees a whole message or none.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        # kombu's name: readers take `*.<queue>.msg` in name order (the time first).
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        folder = self.data_folder_out
        try:
            # A dotfile: the part after its first dot is never "<queue>.msg".
            descriptor, partial = tempfile.mkstemp(dir=folder, prefix=".", suffix=".partial")
            with os.fdopen(descriptor, "wb") as sink:
                sink.write(str_to_bytes(dumps(payload)))
            os.replace(partial, os.path.join(folder, name))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
