"""Generated gRPC/protobuf code (runtime_pb2.pyi: the messages' types, for mypy).
Regenerate from src/ with:
python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. \
    edl/runtime/proto/runtime.proto
"""
