/* Scatter-gather tagged messages (UCP's IOV datatype) straight from and into pool memory: the part of UCP
 * that ucxx's Python API does not expose. Built by services/kvxfer/iov.py against the libucx wheel's headers.
 *
 * One batch is the scatter-gather messages of one pull, posted in one call and tested in one call: a Python
 * status call per pending message and event-loop turn cost the destination ~15-25 ms of a 256 MB pull (64
 * messages, ~2,000 turns). A batch owns its message table and iov arrays until every posted message has ended;
 * iov_test frees them (and the UCP requests) then. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

typedef struct {
    void *request;             /* the UCP request, NULL once ended (or done when posted) */
    int64_t expected;          /* bytes a receive must get */
    ucp_tag_recv_info_t info;  /* what a receive got */
} iov_msg_t;

typedef struct {
    iov_msg_t *msgs;      /* NULL once every posted message has ended */
    ucp_dt_iov_t *iov;    /* all messages' ranges, back to back */
    int64_t posted;       /* messages posted */
    int64_t next;         /* messages before this one have ended */
    int receive;
    int status;           /* the first failure (posting included), else UCS_OK */
} iov_batch_t;

static void fail(iov_batch_t *b, int status) {
    if (b->status == UCS_OK) b->status = status;
}

static void release(iov_batch_t *b) {
    free(b->msgs);
    free(b->iov);
    b->msgs = NULL;
    b->iov = NULL;
}

/* Post n messages on an endpoint (send) or a worker (receive): message i has tag tags[i] and the next counts[i]
 * ranges (base + offsets[j], lengths[j]). UCS_OK, or the failure that stopped posting (the messages posted
 * before it stay posted: test the batch until it ends). */
int iov_post(uint64_t handle, int receive, int64_t n, const uint64_t *tags, const int64_t *counts, uint64_t base,
             const int64_t *offsets, const int64_t *lengths, iov_batch_t *b) {
    int64_t ranges = 0;
    for (int64_t i = 0; i < n; i++) ranges += counts[i];
    memset(b, 0, sizeof *b);
    b->receive = receive;
    b->msgs = calloc((size_t)n, sizeof(iov_msg_t));
    b->iov = malloc(sizeof(ucp_dt_iov_t) * (size_t)ranges);
    if (b->msgs == NULL || b->iov == NULL) {
        release(b);
        b->status = UCS_ERR_NO_MEMORY;
        return b->status;
    }
    for (int64_t j = 0; j < ranges; j++) {
        b->iov[j].buffer = (void *)(uintptr_t)(base + (uint64_t)offsets[j]);
        b->iov[j].length = (size_t)lengths[j];
    }
    ucp_dt_iov_t *iov = b->iov;
    for (int64_t i = 0; i < n; i++) {
        iov_msg_t *m = &b->msgs[i];
        ucs_status_ptr_t r;
        if (receive) {
            for (int64_t j = 0; j < counts[i]; j++) m->expected += (int64_t)iov[j].length;
            ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_RECV_INFO,
                                         .datatype = ucp_dt_make_iov(), .recv_info.tag_info = &m->info};
            r = ucp_tag_recv_nbx((ucp_worker_h)(uintptr_t)handle, iov, (size_t)counts[i], tags[i], (ucp_tag_t)-1,
                                 &param);
        } else {
            ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE, .datatype = ucp_dt_make_iov()};
            r = ucp_tag_send_nbx((ucp_ep_h)(uintptr_t)handle, iov, (size_t)counts[i], tags[i], &param);
        }
        if (UCS_PTR_IS_ERR(r)) {
            fail(b, UCS_PTR_STATUS(r));
            break;
        }
        m->request = r;  /* NULL: done at once (a receive's info filled in then) */
        b->posted = i + 1;
        iov += counts[i];
    }
    if (b->posted == 0) release(b);
    return b->status;
}

/* UCS_INPROGRESS while a posted message is under way; else how the batch ended (UCS_OK, or its first failure:
 * a message of another size than its ranges is truncated). Messages end in about the order posted, so the
 * scan resumes at the first one still under way. */
int iov_test(iov_batch_t *b) {
    for (; b->next < b->posted; b->next++) {
        iov_msg_t *m = &b->msgs[b->next];
        int status = UCS_OK;
        if (m->request != NULL) {
            status = b->receive ? ucp_tag_recv_request_test(m->request, &m->info)
                                : ucp_request_check_status(m->request);
            if (status == UCS_INPROGRESS) return status;
            ucp_request_free(m->request);
            m->request = NULL;
        }
        if (status == UCS_OK && b->receive && (int64_t)m->info.length != m->expected) {
            status = UCS_ERR_MESSAGE_TRUNCATED;
        }
        if (status != UCS_OK) fail(b, status);
    }
    if (b->msgs != NULL) release(b);
    return b->status;
}

/* Withdraw the messages still under way (they then end as cancelled). */
void iov_cancel(uint64_t worker, iov_batch_t *b) {
    for (int64_t i = b->next; i < b->posted; i++) {
        if (b->msgs[i].request != NULL) ucp_request_cancel((ucp_worker_h)(uintptr_t)worker, b->msgs[i].request);
    }
}

const char *iov_status_text(int status) { return ucs_status_string((ucs_status_t)status); }

/* sizeof(iov_batch_t): the caller allocates batches opaquely. */
int64_t iov_batch_size(void) { return (int64_t)sizeof(iov_batch_t); }
