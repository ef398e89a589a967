"""Generated gRPC/protobuf code. Regenerate from src/ with:
python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. edl/runtime/proto/runtime.proto
"""
