"""The service's messages as the JSON the gateway answers with: protobuf's JSON mapping with the field
names of proto/xce/v1/api.proto (64-bit integers are strings there, as in every protobuf JSON API, so
that no JavaScript client rounds a job id). Pure."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message


def message(msg: Message) -> dict[str, Any]:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def messages(items: Any) -> list[dict[str, Any]]:
    return [message(item) for item in items]
