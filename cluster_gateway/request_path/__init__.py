"""The request path both data planes share: parse → admit → schedule → dispatch → record outcome.

The embedded proxy (`proxy/`) and the Envoy ext_proc picker (`extproc/`) differ only in how bytes
travel; what crosses the gateway (`headers`), admission, scheduling and in-flight accounting
(`dispatch`), outlier detection (`outliers`) and the models listing live here once.
"""
