"""The request path: admission, scheduling glue and the embedded streaming proxy."""
