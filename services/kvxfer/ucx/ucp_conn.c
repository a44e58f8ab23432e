/* Screening UCX connection requests by the client's address, before any endpoint exists: the part of UCP that
 * ucxx's Python API does not expose (its listener takes no bind address). Built by services/kvxfer/conn_filter.py
 * against the headers of the libucx wheel and the libucxx wheel's library. */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

/* ucxx::Listener::getHandle(), a public non-virtual member of libucxx: `this` is its only argument. */
extern ucp_listener_h _ZN4ucxx8Listener9getHandleEv(void *listener);

/* Writes the client's address of a connection request as text into ip[len]; 0, or a UCS status / -1. */
int conn_client(uint64_t request, char *ip, int len) {
    ucp_conn_request_attr_t attr = {.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR};
    ucs_status_t status = ucp_conn_request_query((ucp_conn_request_h)request, &attr);
    if (status != UCS_OK) return status;
    const struct sockaddr *addr = (const struct sockaddr *)&attr.client_address;
    const void *bytes = addr->sa_family == AF_INET ? (const void *)&((const struct sockaddr_in *)addr)->sin_addr
                      : addr->sa_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)addr)->sin6_addr
                      : NULL;
    if (bytes == NULL || inet_ntop(addr->sa_family, bytes, ip, (socklen_t)len) == NULL) return -1;
    return 0;
}

/* Refuses a connection request of the listener (a ucxx::Listener*, UCXListener.ucxx_ptr): the client's
 * endpoint fails, this side never makes one. */
int conn_reject(void *listener, uint64_t request) {
    return ucp_listener_reject(_ZN4ucxx8Listener9getHandleEv(listener), (ucp_conn_request_h)request);
}
