"""kvxfer's cross-host path over UCX (ucxx): the transport and its frames, sealing and scatter-gather messages, the
progress loop, the listener's connection filter, peer discovery, UCX settings, and the one adapter over ucxx's
private parts. The rest of kvxfer (leases, pools, same-host copies) knows none of it but `transport`."""
