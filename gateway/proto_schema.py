"""JSON Schemas of the service's messages as the gateway speaks them (protobuf's JSON mapping with the
field names of proto/xce/v1/api.proto), made from the messages' descriptors so that the OpenAPI
document cannot drift from the wire; and the check that a request body uses only those names. Pure.

Answers (`direction="out"`) are what json_format.MessageToDict writes: 64-bit integers as decimal
strings, enums by name, doubles as numbers or "NaN"/"Infinity"/"-Infinity", fields at their default
left out. Requests (`direction="in"`) are what json_format.ParseDict takes, less what the gateway
refuses on purpose (forms.strict_names): a field's camelCase alias and `null`, which protobuf would
take silently for "the default" and a client almost always sends by mistake.
"""

from __future__ import annotations

from typing import Any, Literal

from google.protobuf.descriptor import FieldDescriptor

from gateway.problems import Problem

Direction = Literal["in", "out"]
Descriptor = Any  # a message's descriptor (the pure-Python class or upb's: the same interface)
Schema = dict[str, Any]
REF = "#/components/schemas/"
_INT32 = (-(1 << 31), (1 << 31) - 1)
_RANGES = {FieldDescriptor.TYPE_INT32: _INT32, FieldDescriptor.TYPE_SINT32: _INT32,
           FieldDescriptor.TYPE_SFIXED32: _INT32, FieldDescriptor.TYPE_UINT32: (0, (1 << 32) - 1),
           FieldDescriptor.TYPE_FIXED32: (0, (1 << 32) - 1),
           FieldDescriptor.TYPE_INT64: (-(1 << 63), (1 << 63) - 1),
           FieldDescriptor.TYPE_SINT64: (-(1 << 63), (1 << 63) - 1),
           FieldDescriptor.TYPE_SFIXED64: (-(1 << 63), (1 << 63) - 1),
           FieldDescriptor.TYPE_UINT64: (0, (1 << 64) - 1), FieldDescriptor.TYPE_FIXED64: (0, (1 << 64) - 1)}
_WIDE = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64,
         FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64}
_FLOATS = {FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT}
_SPECIAL_FLOATS = ["NaN", "Infinity", "-Infinity"]


def name_of(descriptor: Descriptor, direction: Direction) -> str:
    """The component's name: the message's, nested ones joined with `_`; requests' end in `Input`."""
    own = str(descriptor.full_name).removeprefix(descriptor.file.package + ".").replace(".", "_")
    return own + "Input" if direction == "in" else own


def schemas(roots: list[Descriptor], direction: Direction) -> dict[str, Schema]:
    """Every message reachable from `roots`, by component name."""
    found: dict[str, Schema] = {}
    pending = list(roots)
    while pending:
        descriptor = pending.pop()
        name = name_of(descriptor, direction)
        if name in found:
            continue
        properties: dict[str, Schema] = {}
        for field in descriptor.fields:
            properties[field.name] = _field(field, direction, pending)
        found[name] = {"type": "object", "properties": properties, "additionalProperties": False}
        if descriptor.GetOptions().deprecated:
            found[name]["deprecated"] = True
    return dict(sorted(found.items()))


def ref(descriptor: Descriptor, direction: Direction) -> Schema:
    return {"$ref": REF + name_of(descriptor, direction)}


def _field(field: FieldDescriptor, direction: Direction, pending: list[Descriptor]) -> Schema:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        key, value = message.fields_by_name["key"], message.fields_by_name["value"]
        schema: Schema = {"type": "object", "additionalProperties": _single(value, direction, pending)}
        if key.type in _RANGES:  # a map's keys are strings in JSON; integer keys their decimal text
            schema["propertyNames"] = {"pattern": "^-?[0-9]+$"}
        return schema
    single = _single(field, direction, pending)
    if field.is_repeated:
        return {"type": "array", "items": single}
    return single


def _single(field: FieldDescriptor, direction: Direction, pending: list[Descriptor]) -> Schema:
    kind = field.type
    if field.message_type is not None:
        pending.append(field.message_type)
        return ref(field.message_type, direction)
    if kind == FieldDescriptor.TYPE_ENUM:
        names = [value.name for value in field.enum_type.values]  # type: ignore[union-attr]
        if direction == "out":
            return {"type": "string", "enum": names}
        return {"anyOf": [{"type": "string", "enum": names},
                          {"type": "integer", "minimum": _INT32[0], "maximum": _INT32[1]}]}
    if kind in _RANGES:
        low, high = _RANGES[kind]
        number = {"type": "integer", "minimum": low, "maximum": high}
        if direction == "out":
            return {"type": "string", "pattern": "^[0-9]+$" if low == 0 else "^-?[0-9]+$"} \
                if kind in _WIDE else number
        # In, protobuf also takes an integer as its decimal text (whose range the parser checks).
        return {"anyOf": [number, {"type": "string", "description": "the integer in decimal"}]}
    if kind in _FLOATS:
        if direction == "out":
            return {"anyOf": [{"type": "number"}, {"type": "string", "enum": _SPECIAL_FLOATS}]}
        return {"anyOf": [{"type": "number"}, {"type": "string", "description": "the number in decimal, "
                                                                  "or NaN, Infinity, -Infinity"}]}
    if kind == FieldDescriptor.TYPE_BOOL:
        return {"type": "boolean"}
    if kind == FieldDescriptor.TYPE_BYTES:
        return {"type": "string", "contentEncoding": "base64"}
    return {"type": "string"}


def strict_names(value: Any, descriptor: Descriptor, where: str) -> None:
    """Refuse (400) what protobuf's JSON parser would take but the contract does not: a field by its
    camelCase alias, or null. Unknown names and wrong types are the parser's to refuse."""
    if not isinstance(value, dict):
        return
    for key, item in value.items():
        field = descriptor.fields_by_name.get(key)
        if field is None:
            alias = next((f.name for f in descriptor.fields if f.json_name == key), None)
            if alias is not None:
                raise Problem(400, f"{where}: {key!r} is spelt {alias!r} here (the names of api.proto)")
            continue
        if item is None:
            raise Problem(400, f"{where}: {key} is null: leave a field out for its default")
        message = field.message_type
        if message is None:
            continue
        if message.GetOptions().map_entry:
            target = message.fields_by_name["value"].message_type
            for inner in (item.values() if isinstance(item, dict) else ()):
                if inner is None:
                    raise Problem(400, f"{where}: {key} has a null value")
                if target is not None:
                    strict_names(inner, target, f"{where}.{key}")
        elif field.is_repeated:
            for i, inner in enumerate(item if isinstance(item, list) else ()):
                if inner is None:
                    raise Problem(400, f"{where}: {key}[{i}] is null")
                strict_names(inner, message, f"{where}.{key}[{i}]")
        else:
            strict_names(item, message, f"{where}.{key}")
