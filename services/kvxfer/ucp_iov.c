/* Scatter-gather tagged messages (UCP's IOV datatype) straight from and into pool memory: the part of UCP
 * that ucxx's Python API does not expose. Built by services/kvxfer/iov.py against the libucx wheel's headers.
 *
 * A transfer owns its iov array until it ends; iov_test frees it (and the UCP request) once it has. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

typedef struct {
    void *request;        /* the UCP request, NULL once ended */
    ucp_dt_iov_t *iov;    /* freed once ended */
    int64_t expected;     /* bytes a receive must get; -1 for a send */
    ucp_tag_recv_info_t info;  /* what a receive got */
} iov_xfer_t;

static int post(iov_xfer_t *x, int64_t n, uint64_t base, const int64_t *offsets, const int64_t *lengths) {
    x->request = NULL;
    x->iov = malloc(sizeof(ucp_dt_iov_t) * (size_t)n);
    if (x->iov == NULL) return UCS_ERR_NO_MEMORY;
    for (int64_t i = 0; i < n; i++) {
        x->iov[i].buffer = (void *)(uintptr_t)(base + (uint64_t)offsets[i]);
        x->iov[i].length = (size_t)lengths[i];
    }
    return UCS_OK;
}

static int posted(iov_xfer_t *x, ucs_status_ptr_t r) {
    if (UCS_PTR_IS_ERR(r)) {
        free(x->iov);
        x->iov = NULL;
        return UCS_PTR_STATUS(r);
    }
    x->request = r;  /* NULL: done at once */
    return UCS_OK;
}

/* Send n ranges (base + offsets[i], lengths[i]) as one message on ep; UCS_OK or a failure status. */
int iov_send(uint64_t ep, uint64_t tag, int64_t n, uint64_t base, const int64_t *offsets, const int64_t *lengths,
             iov_xfer_t *x) {
    int status = post(x, n, base, offsets, lengths);
    if (status != UCS_OK) return status;
    x->expected = -1;
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE, .datatype = ucp_dt_make_iov()};
    return posted(x, ucp_tag_send_nbx((ucp_ep_h)(uintptr_t)ep, x->iov, (size_t)n, tag, &param));
}

/* Receive one message with exactly this tag into n ranges; UCS_OK or a failure status. */
int iov_recv(uint64_t worker, uint64_t tag, int64_t n, uint64_t base, const int64_t *offsets,
             const int64_t *lengths, iov_xfer_t *x) {
    int status = post(x, n, base, offsets, lengths);
    if (status != UCS_OK) return status;
    x->expected = 0;
    for (int64_t i = 0; i < n; i++) x->expected += lengths[i];
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_RECV_INFO,
                                 .datatype = ucp_dt_make_iov(), .recv_info.tag_info = &x->info};
    return posted(x, ucp_tag_recv_nbx((ucp_worker_h)(uintptr_t)worker, x->iov, (size_t)n, tag, (ucp_tag_t)-1,
                                      &param));
}

/* UCS_INPROGRESS while under way; else how it ended (UCS_OK, or a failure: a short message is truncated). */
int iov_test(iov_xfer_t *x) {
    int status = UCS_OK;  /* a request of NULL: done when posted (a receive's info filled in then) */
    if (x->request != NULL) {
        status = x->expected >= 0 ? ucp_tag_recv_request_test(x->request, &x->info)
                                  : ucp_request_check_status(x->request);
        if (status == UCS_INPROGRESS) return status;
        ucp_request_free(x->request);
        x->request = NULL;
    }
    if (status == UCS_OK && x->expected >= 0 && (int64_t)x->info.length != x->expected) {
        status = UCS_ERR_MESSAGE_TRUNCATED;
    }
    free(x->iov);
    x->iov = NULL;
    return status;
}

/* Withdraw a transfer under way (it then ends as cancelled). */
void iov_cancel(uint64_t worker, iov_xfer_t *x) {
    if (x->request != NULL) ucp_request_cancel((ucp_worker_h)(uintptr_t)worker, x->request);
}

const char *iov_status_text(int status) { return ucs_status_string((ucs_status_t)status); }

/* sizeof(iov_xfer_t): the caller allocates transfers opaquely. */
int64_t iov_xfer_size(void) { return (int64_t)sizeof(iov_xfer_t); }
