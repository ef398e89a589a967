from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("id", "dtype", "shape", "data")
    ID_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, id: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class Dataset(_message.Message):
    __slots__ = ("num_samples", "chunk_size", "chunks_per_task")
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_PER_TASK_FIELD_NUMBER: _ClassVar[int]
    num_samples: int
    chunk_size: int
    chunks_per_task: int
    def __init__(self, num_samples: _Optional[int] = ..., chunk_size: _Optional[int] = ..., chunks_per_task: _Optional[int] = ...) -> None: ...

class DatasetReply(_message.Message):
    __slots__ = ("num_tasks", "passes")
    NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
    PASSES_FIELD_NUMBER: _ClassVar[int]
    num_tasks: int
    passes: int
    def __init__(self, num_tasks: _Optional[int] = ..., passes: _Optional[int] = ...) -> None: ...

class TaskRequest(_message.Message):
    __slots__ = ("trainer",)
    TRAINER_FIELD_NUMBER: _ClassVar[int]
    trainer: str
    def __init__(self, trainer: _Optional[str] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("id", "epoch", "begin", "end", "batch_size")
    ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PASS_FIELD_NUMBER: _ClassVar[int]
    BEGIN_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    id: int
    epoch: int
    begin: int
    end: int
    batch_size: int
    def __init__(self, id: _Optional[int] = ..., epoch: _Optional[int] = ..., begin: _Optional[int] = ..., end: _Optional[int] = ..., batch_size: _Optional[int] = ..., **kwargs) -> None: ...

class TaskReply(_message.Message):
    __slots__ = ("status", "task")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TASK: _ClassVar[TaskReply.Status]
        WAIT: _ClassVar[TaskReply.Status]
        DONE: _ClassVar[TaskReply.Status]
        NO_DATASET: _ClassVar[TaskReply.Status]
    TASK: TaskReply.Status
    WAIT: TaskReply.Status
    DONE: TaskReply.Status
    NO_DATASET: TaskReply.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    status: TaskReply.Status
    task: Task
    def __init__(self, status: _Optional[_Union[TaskReply.Status, str]] = ..., task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class TaskReport(_message.Message):
    __slots__ = ("trainer", "id", "epoch", "samples", "loss", "error", "batch_size", "compute_seconds")
    TRAINER_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    trainer: str
    id: int
    epoch: int
    samples: int
    loss: float
    error: str
    batch_size: int
    compute_seconds: float
    def __init__(self, trainer: _Optional[str] = ..., id: _Optional[int] = ..., epoch: _Optional[int] = ..., samples: _Optional[int] = ..., loss: _Optional[float] = ..., error: _Optional[str] = ..., batch_size: _Optional[int] = ..., compute_seconds: _Optional[float] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("trainer",)
    TRAINER_FIELD_NUMBER: _ClassVar[int]
    trainer: str
    def __init__(self, trainer: _Optional[str] = ...) -> None: ...

class ProgressRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ProgressReply(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class Metrics(_message.Message):
    __slots__ = ("trainer", "values")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TRAINER_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    trainer: str
    values: _containers.ScalarMap[str, float]
    def __init__(self, trainer: _Optional[str] = ..., values: _Optional[_Mapping[str, float]] = ...) -> None: ...

class OptimizerConfig(_message.Message):
    __slots__ = ("name", "lr", "momentum", "beta1", "beta2", "eps", "weight_decay")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    MOMENTUM_FIELD_NUMBER: _ClassVar[int]
    BETA1_FIELD_NUMBER: _ClassVar[int]
    BETA2_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    name: str
    lr: float
    momentum: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    def __init__(self, name: _Optional[str] = ..., lr: _Optional[float] = ..., momentum: _Optional[float] = ..., beta1: _Optional[float] = ..., beta2: _Optional[float] = ..., eps: _Optional[float] = ..., weight_decay: _Optional[float] = ...) -> None: ...

class InitRequest(_message.Message):
    __slots__ = ("params", "optimizer")
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    params: _containers.RepeatedCompositeFieldContainer[Tensor]
    optimizer: OptimizerConfig
    def __init__(self, params: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., optimizer: _Optional[_Union[OptimizerConfig, _Mapping]] = ...) -> None: ...

class PushRequest(_message.Message):
    __slots__ = ("grads", "pull", "samples", "grad_sqnorm")
    GRADS_FIELD_NUMBER: _ClassVar[int]
    PULL_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    GRAD_SQNORM_FIELD_NUMBER: _ClassVar[int]
    grads: _containers.RepeatedCompositeFieldContainer[Tensor]
    pull: bool
    samples: int
    grad_sqnorm: float
    def __init__(self, grads: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., pull: _Optional[bool] = ..., samples: _Optional[int] = ..., grad_sqnorm: _Optional[float] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ParamsReply(_message.Message):
    __slots__ = ("initialized", "params", "version")
    INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    initialized: bool
    params: _containers.RepeatedCompositeFieldContainer[Tensor]
    version: int
    def __init__(self, initialized: _Optional[bool] = ..., params: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., version: _Optional[int] = ...) -> None: ...
