"""Storage: bounded byte reads (files, local and zip stores, remote stores, kerchunk references).

The lowest layer above the leaves (the TensorStore "kvstore", zarr's "storage"): it knows
bytes and stores, never a chunk. It imports only `errors`, `settings` and the leaves
(`tests/core/test_layers.py`). Its private helpers are `_sync` (synchronous reads for zarr
stores) and `_fetch` (referenced bytes). Remote bytes come through obstore behind one thin
capping layer (`remote`: `RemoteStore`, and `RemoteFiles` for the references), its
failures read by `remote_errors`; `remote_config` is how its requests travel (CA bundle,
proxy, headers per host), `s3` how S3 stores are configured.
"""

from napari_lazy_zarr.core.storage.files import (
    MAX_JSON_DEPTH,
    FileChangedError,
    FileStamp,
    load_json,
    open_regular_file,
    read_regular_file,
    read_stamped,
)
from napari_lazy_zarr.core.storage.local import (
    DEFAULT_MAX_VALUE_BYTES,
    MAX_ZIP_DIRECTORY_BYTES,
    MAX_ZIP_MEMBERS,
    BoundedLocalStore,
    BoundedZipStore,
    bounded_store,
    range_arguments,
    range_size,
    store_for,
    zarr_errors,
)
from napari_lazy_zarr.core.storage.memo import (
    MetadataMemoStore,
    forget_metadata,
    is_metadata_key,
)
from napari_lazy_zarr.core.storage.policy import (
    ALLOWED_REMOTES_VARIABLE,
    ALLOWED_ROOTS_VARIABLE,
    BUCKET_PROTOCOLS,
    IPAddress,
    ReferencePolicy,
    address_problem,
)
from napari_lazy_zarr.core.storage.references import (
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_REFERENCES,
    ManifestStore,
    Resolver,
    policy_source,
    read_json,
)
from napari_lazy_zarr.core.storage.remote import (
    DEFAULT_MAX_BODY_BYTES,
    METADATA_DOCUMENTS,
    RemoteFiles,
    RemoteStore,
    remote_store_of,
)
from napari_lazy_zarr.core.storage.remote_config import (
    HeaderRule,
    RemoteConfig,
    header_rules,
    remote_config,
)
from napari_lazy_zarr.core.storage.remote_errors import (
    CA_BUNDLE_HINT,
    HttpAccessDeniedError,
    HttpBodyTooLargeError,
    HttpCertificateError,
    HttpError,
    HttpRangeError,
    HttpStatusError,
)
from napari_lazy_zarr.core.storage.retry import (
    NO_RETRY,
    RetryPolicy,
    attempts_note,
    classify,
    retry_after,
)
from napari_lazy_zarr.core.storage.s3 import (
    S3_SCHEMES,
    S3_SETTINGS,
    explain_s3_failure,
    is_s3,
    s3_errors,
)
from napari_lazy_zarr.core.storage.vetting import (
    ATTRIBUTE_FILES,
    MAX_METADATA_BYTES,
    METADATA_FILES,
    check_document,
    check_local,
    check_safe,
    group_arrays,
    is_remote,
    is_url,
    metadata_files,
)

__all__ = [
    "ALLOWED_REMOTES_VARIABLE",
    "ALLOWED_ROOTS_VARIABLE",
    "ATTRIBUTE_FILES",
    "BUCKET_PROTOCOLS",
    "CA_BUNDLE_HINT",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_VALUE_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_MANIFEST_BYTES",
    "MAX_MANIFEST_REFERENCES",
    "MAX_METADATA_BYTES",
    "MAX_ZIP_DIRECTORY_BYTES",
    "MAX_ZIP_MEMBERS",
    "METADATA_DOCUMENTS",
    "METADATA_FILES",
    "NO_RETRY",
    "S3_SCHEMES",
    "S3_SETTINGS",
    "BoundedLocalStore",
    "BoundedZipStore",
    "FileChangedError",
    "FileStamp",
    "HeaderRule",
    "HttpAccessDeniedError",
    "HttpBodyTooLargeError",
    "HttpCertificateError",
    "HttpError",
    "HttpRangeError",
    "HttpStatusError",
    "IPAddress",
    "ManifestStore",
    "MetadataMemoStore",
    "ReferencePolicy",
    "RemoteConfig",
    "RemoteFiles",
    "RemoteStore",
    "Resolver",
    "RetryPolicy",
    "address_problem",
    "attempts_note",
    "bounded_store",
    "check_document",
    "check_local",
    "check_safe",
    "classify",
    "explain_s3_failure",
    "forget_metadata",
    "group_arrays",
    "header_rules",
    "is_metadata_key",
    "is_remote",
    "is_s3",
    "is_url",
    "load_json",
    "metadata_files",
    "open_regular_file",
    "policy_source",
    "range_arguments",
    "range_size",
    "read_json",
    "read_regular_file",
    "read_stamped",
    "remote_config",
    "remote_store_of",
    "retry_after",
    "s3_errors",
    "store_for",
    "zarr_errors",
]
