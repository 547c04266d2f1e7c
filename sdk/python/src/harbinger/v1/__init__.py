"""Code generated from api/harbinger/v1/harbinger.proto by genproto.sh; do not edit the harbinger_pb2* modules by hand."""
