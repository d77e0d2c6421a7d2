// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Per-packet sojourn time in the qdiscs of chosen devices, from the kernel's
// qdisc_enqueue and qdisc_dequeue tracepoints (raw, BTF-typed: tp_btf).
//
// qdisc_enqueue fires in dev_qdisc_enqueue once the root qdisc of a tx queue took
// the skb (an mq's child is the root of its queue); the skb is stamped there, keyed
// by its address. qdisc_dequeue fires in dequeue_skb with the first skb of what
// it took (a bulk dequeue chains up to `packets` skbs through skb->next); each
// stamped one becomes a sojourn in its qdisc's histogram, once for each packet it
// goes out as (a GSO skb's segments, which tc's packet counter counts too), and
// loses its stamp. An
// skb the qdisc dropped is never dequeued: its stamp ages out of the LRU map and is
// no sojourn. A dequeued skb without a stamp (requeued after a first dequeue) is
// counted apart.
//
// A qdisc that splits GSO skbs as it takes them (dualpi2 by default, cake with
// split-gso) queues segments the stack never saw, and the tracepoint then names
// the original skb, already freed. So the segments are stamped where they are
// made: on return from __skb_gso_segment, for skbs bound for a traced device,
// with no qdisc named (any of the device's qdiscs may dequeue them). Segments
// made after a dequeue (software GSO on the way to the driver) are stamped too
// and never dequeued: their stamps age out of the LRU map like a drop's. This
// program is optional: on a kernel that cannot attach it, those qdiscs' segments
// count as unstamped.
//
// The structs below are the kernel's, reduced to the fields read here; CO-RE
// relocates each access to the running kernel's layout (its BTF), so one object
// runs on every kernel with BTF and these tracepoints.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

typedef __u32 u32;
typedef __u64 u64;
typedef __u16 u16;
typedef __u8 u8;

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} __attribute__((preserve_access_index)) possible_net_t;

struct netdev_queue;
struct Qdisc;

struct net_device {
	int ifindex;
	possible_net_t nd_net;
	struct netdev_queue *_tx;
	unsigned int num_tx_queues;
	struct Qdisc *qdisc; // the root
} __attribute__((preserve_access_index));

struct Qdisc {
	void *enqueue; // a function; NULL for noqueue, which holds nothing
	u32 handle;
	u32 parent;
	struct netdev_queue *dev_queue;
} __attribute__((preserve_access_index));

struct netdev_queue {
	struct net_device *dev;
	struct Qdisc *qdisc;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct sk_buff *next;
	struct net_device *dev;
	unsigned int len;
	unsigned int end;
	unsigned char *head;
	__u16 queue_mapping;
	__u16 protocol; // __be16
	__u16 network_header;
} __attribute__((preserve_access_index));

struct skb_shared_info {
	unsigned short gso_segs;
} __attribute__((preserve_access_index));

// Log-linear buckets: values below 2^SUB_BITS ns exact, then 2^SUB_BITS
// sub-buckets per power of two (each at most 1/32 of its value wide, so a bucket's
// midpoint is within 1.6% of every value in it), up to 2^MAX_EXP ns (68.7 s);
// longer is the last bucket. The Go side (hist.go) maps buckets back to times.
#define SUB_BITS 5
#define SUBS (1 << SUB_BITS)
#define MAX_EXP 36
#define BUCKETS ((MAX_EXP - SUB_BITS + 1) * SUBS)

// The longest bulk dequeue followed through skb->next: dequeue_skb takes up to
// the tx queue's BQL budget, which rarely holds more; the rest are counted apart.
// tbf on a veth (no BQL) was seen to give up more than 64 segments at once.
// sojourn.go's MaxBulk is the same number.
#define MAX_BULK 256


// A qdisc's packets have two histograms: every packet's (class ALL), and its ICMP
// echo requests' and replies' (class ECHO), the probes a ping sends. A flow-queuing
// qdisc keeps a ping apart from the bulk flows, so what the ping waited there is
// its own packets' sojourn, not the median of every packet's.
#define CLASS_ALL 0
#define CLASS_ECHO 1

struct qdisc_key {
	u32 ifindex;
	u32 handle;
	u32 parent;
	u32 class;
};

// A stamp's qdisc: the qdisc that took the skb, 0 for a segment cut where no
// qdisc is named, or DEQUEUED once a qdisc gave the skb up (no kernel pointer is 1).
#define DEQUEUED 1

struct stamp {
	u64 ns;
	u64 qdisc;
	u32 echo;
	u32 pad;
};

struct hist {
	u64 count[BUCKETS];
	u64 sum_ns;
	u64 max_ns;
	u64 unstamped; // dequeued without a stamp
	u64 beyond_bulk; // in a bulk dequeue past MAX_BULK: not followed
	u64 bypassed; // went to the driver past the empty qdisc: in count[0] too
};

// The devices traced: their network namespace's inode and their ifindexes, set
// by the loader as constants (.rodata), so that the verifier folds them in and
// the check on every enqueue and dequeue of the machine (each agent's programs
// see every qdisc's) is a few compares, not a map lookup. sojourn.go's MaxDevices
// is MAX_DEVS.
#define MAX_DEVS 16
volatile const u32 netns_ino = 0;
volatile const u32 n_devs = 0;
volatile const u32 ifindexes[MAX_DEVS] = {};

// Stamps of skbs in a traced qdisc. LRU: a dropped skb's stamp is evicted in time,
// and a full map loses the oldest stamps, never the tracer.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 131072);
	__type(key, u64);
	__type(value, struct stamp);
} stamps SEC(".maps");

// The segments this CPU's last dequeue gave up in GSO skbs and the device it was
// of, that its driver has not been handed yet.
struct credit {
	u64 segs;
	u32 ifindex;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct credit);
} credits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 512); // 256 qdiscs, two classes each
	__type(key, struct qdisc_key);
	__type(value, struct hist);
} hists SEC(".maps");

static __always_inline u32 log2_u64(u64 v)
{
	u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

static __always_inline u32 bucket_of(u64 ns)
{
	if (ns < SUBS)
		return ns;
	u32 e = log2_u64(ns);
	if (e >= MAX_EXP)
		return BUCKETS - 1;
	return (e - SUB_BITS + 1) * SUBS + ((ns >> (e - SUB_BITS)) & (SUBS - 1));
}

// The programs read the kernel's structs by plain loads, not bpf_probe_read_kernel:
// a tracing program's arguments are typed by BTF, so the verifier lets it follow
// their pointers, and the JIT makes each load an instruction that yields 0 where
// the pointer is bad. Every enqueue and dequeue on the machine runs them (each
// agent's, on a lab that shares a kernel), and a helper call for each field was
// most of their cost.
static __always_inline int traced_dev(struct net_device *dev)
{
	if (!dev)
		return 0;
	u32 ifindex = dev->ifindex;
	int hit = 0;
#pragma unroll
	for (int i = 0; i < MAX_DEVS; i++)
		if (i < n_devs && ifindexes[i] == ifindex)
			hit = 1;
	return hit && dev->nd_net.net->ns.inum == netns_ino;
}

static __always_inline int traced(struct Qdisc *q)
{
	struct netdev_queue *txq = q->dev_queue;
	return txq ? traced_dev(txq->dev) : 0;
}

// segs_of is the packets an skb goes out as: a GSO skb's segments (the qdisc took
// it whole, and the driver or validate_xmit_skb cuts it after the dequeue), else
// one. skb_shinfo is at head + end (end an offset on 64-bit kernels).
static __always_inline u64 segs_of(struct sk_buff *skb)
{
	// head is no struct's pointer to the verifier: the shared info is read by
	// the helper.
	struct skb_shared_info *shinfo = (struct skb_shared_info *)(skb->head + skb->end);
	unsigned short segs = BPF_CORE_READ(shinfo, gso_segs);
	return segs ? segs : 1;
}

// is_echo says whether an skb is an ICMP echo request or reply, IPv4 or IPv6 (no
// extension headers: a ping sends none), from its network header, which both the
// local stack and the forwarding path have set by the time a qdisc takes it. The
// header's first 64 bytes are read at once: an IPv4 header of up to 60, then the
// ICMP type.
static __always_inline u32 is_echo(struct sk_buff *skb)
{
	__u16 proto = skb->protocol;
	if (proto != bpf_htons(0x0800) && proto != bpf_htons(0x86DD))
		return 0;
	unsigned char h[64];
	if (bpf_probe_read_kernel(h, sizeof(h), skb->head + skb->network_header))
		return 0;
	if (proto == bpf_htons(0x0800)) {
		u32 ihl = (h[0] & 0xf) * 4;
		if (h[9] != 1 || ihl < 20)
			return 0;
		__u8 type = h[ihl & 63];
		return type == 8 || type == 0;
	}
	return h[6] == 58 && (h[40] == 128 || h[40] == 129);
}

// A connection's packets through one tx queue of a traced device: which queue
// (and so which of mq's children) each flow and probe went through, counted where
// every packet the device sends reaches its driver, once. The connection is as the
// packet's headers name it: its source and destination, and for TCP and UDP their
// ports, for an ICMP echo its identifier in both (a ping socket's "port").
struct conn_key {
	u32 ifindex;
	u32 handle; // the tx queue's qdisc: an mq's child, or the root every queue shares
	u32 parent;
	u16 txq;
	u8 proto;
	u8 family; // 4 or 6
	u8 src[16];
	u8 dst[16];
	u16 sport;
	u16 dport;
};

struct conn_count {
	u64 packets; // each GSO segment one, as the histograms count
	u64 bytes;
};

// Bounded: a run's connections are its flows and probes, and their ACKs and
// replies, on each traced device. A full map counts no new connection (the Go
// side says so when it reads it full).
#define MAX_CONNS 16384

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, struct conn_key);
	__type(value, struct conn_count);
} conns SEC(".maps");

// conn_add counts an skb the driver is handed in its connection's entry for the
// tx queue txq (qdisc handle, parent). The headers' first 72 bytes are read at
// once: an IPv4 header of up to 60, then the ports or the echo identifier.
static __always_inline void conn_add(struct sk_buff *skb, u32 ifindex, u32 txq, u32 handle, u32 parent, u64 segs)
{
	__u16 proto = skb->protocol;
	if (proto != bpf_htons(0x0800) && proto != bpf_htons(0x86DD))
		return;
	unsigned char h[72];
	if (bpf_probe_read_kernel(h, sizeof(h), skb->head + skb->network_header))
		return;
	struct conn_key k = {.ifindex = ifindex, .handle = handle, .parent = parent, .txq = txq};
	u32 l4;
	if (proto == bpf_htons(0x0800)) {
		u32 ihl = (h[0] & 0xf) * 4;
		if (ihl < 20)
			return;
		k.family = 4;
		k.proto = h[9];
		__builtin_memcpy(k.src, &h[12], 4);
		__builtin_memcpy(k.dst, &h[16], 4);
		// A fragment past the first has no ports: counted under none.
		if ((h[6] & 0x1f) || h[7])
			k.proto = 0;
		l4 = ihl & 63;
	} else {
		k.family = 6;
		k.proto = h[6];
		__builtin_memcpy(k.src, &h[8], 16);
		__builtin_memcpy(k.dst, &h[24], 16);
		l4 = 40;
	}
	if (k.proto == 6 || k.proto == 17) {
		k.sport = ((u16)h[l4] << 8) | h[l4 + 1];
		k.dport = ((u16)h[l4 + 2] << 8) | h[l4 + 3];
	} else if ((k.proto == 1 && (h[l4] == 8 || h[l4] == 0)) || (k.proto == 58 && (h[l4] == 128 || h[l4] == 129))) {
		k.sport = k.dport = ((u16)h[l4 + 4] << 8) | h[l4 + 5];
	}
	struct conn_count *c = bpf_map_lookup_elem(&conns, &k);
	if (!c) {
		struct conn_count zero = {};
		bpf_map_update_elem(&conns, &k, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&conns, &k);
		if (!c)
			return;
	}
	__sync_fetch_and_add(&c->packets, segs);
	__sync_fetch_and_add(&c->bytes, (u64)skb->len);
}

static const struct hist zero_hist;

static __always_inline struct hist *hist_at(u32 ifindex, u32 handle, u32 parent, u32 class)
{
	struct qdisc_key k = {.ifindex = ifindex, .handle = handle, .parent = parent, .class = class};
	struct hist *h = bpf_map_lookup_elem(&hists, &k);
	if (h)
		return h;
	bpf_map_update_elem(&hists, &k, &zero_hist, BPF_NOEXIST);
	return bpf_map_lookup_elem(&hists, &k);
}

static __always_inline struct hist *hist_of(struct Qdisc *q, u32 class)
{
	return hist_at(q->dev_queue->dev->ifindex, q->handle, q->parent, class);
}

// hist_add counts segs packets of sojourn d in h. A global function, as echo_add
// below: the verifier checks it once, not once for every skb of a bulk dequeue.
// Checked inline, its branches made the dequeue's loop most of the time the
// kernel took to load the programs (0.3 s of CPU on a 2-core EPYC, seconds in an
// emulated guest), paid by every run.
__attribute__((noinline)) int hist_add(struct hist *h, u64 d, u64 segs)
{
	if (!h)
		return 0;
	u32 b = bucket_of(d);
	if (b < BUCKETS)
		h->count[b] += segs;
	h->sum_ns += d * segs;
	if (d > h->max_ns)
		h->max_ns = d;
	return 0;
}

// echo_add counts an echo packet's sojourn d in its qdisc's echo histogram. It is
// a global function so that the verifier checks it once, not once for every skb
// of a bulk dequeue that the loop below follows (which ran past its million
// instructions when this was inline).
__attribute__((noinline)) int echo_add(u32 ifindex, u32 handle, u32 parent, u64 d)
{
	struct qdisc_key k = {.ifindex = ifindex, .handle = handle, .parent = parent, .class = CLASS_ECHO};
	struct hist *e = bpf_map_lookup_elem(&hists, &k);
	if (!e) {
		bpf_map_update_elem(&hists, &k, &zero_hist, BPF_NOEXIST);
		e = bpf_map_lookup_elem(&hists, &k);
		if (!e)
			return 0;
	}
	u32 b = bucket_of(d);
	if (b < BUCKETS)
		e->count[b] += 1;
	e->sum_ns += d;
	if (d > e->max_ns)
		e->max_ns = d;
	return 0;
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(on_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	if (!traced(q))
		return 0;
	u64 key = (u64)skb;
	struct stamp s = {.ns = bpf_ktime_get_ns(), .qdisc = (u64)q, .echo = is_echo(skb)};
	bpf_map_update_elem(&stamps, &key, &s, BPF_ANY);
	return 0;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(on_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	if (!skb || packets <= 0 || !traced(q))
		return 0;
	struct hist *h = hist_of(q, CLASS_ALL);
	if (!h)
		return 0;
	u32 ifindex = q->dev_queue->dev->ifindex, handle = q->handle, parent = q->parent;
	u64 now = bpf_ktime_get_ns();
	u64 gso = 0;
	for (int i = 0; i < MAX_BULK && i < packets && skb; i++) {
		u64 key = (u64)skb;
		struct stamp *s = bpf_map_lookup_elem(&stamps, &key);
		u64 segs = segs_of(skb);
		if (segs > 1)
			gso += segs;
		if (s && (s->qdisc == (u64)q || s->qdisc == 0) && now >= s->ns) {
			u64 d = now - s->ns;
			hist_add(h, d, segs);
			if (s->echo)
				echo_add(ifindex, handle, parent, d);
			// Marked, not deleted: the driver's tracepoint takes it away.
			s->qdisc = DEQUEUED;
		} else {
			h->unstamped += segs;
			// Went through the qdisc: not a bypass at the driver.
			struct stamp m = {.qdisc = DEQUEUED};
			bpf_map_update_elem(&stamps, &key, &m, BPF_ANY);
		}
		skb = skb->next;
	}
	if (packets > MAX_BULK)
		h->beyond_bulk += packets - MAX_BULK;
	u32 zero = 0;
	struct credit *c = bpf_map_lookup_elem(&credits, &zero);
	if (c) {
		c->segs = gso;
		c->ifindex = ifindex;
	}
	return 0;
}

// Every packet a device sends reaches its driver here, once (a GSO skb whole, or
// its segments where the stack cut it after the dequeue). One whose stamp the
// dequeue marked, or a segment cut after it, went through its qdisc: the stamp
// goes. One without a stamp, or with a stamp a qdisc never gave up (a dropped
// skb's, aged, whose address was reused), passed its tx queue's qdisc empty.
SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(on_xmit, const struct sk_buff *cskb, const struct net_device *cdev)
{
	struct sk_buff *skb = (struct sk_buff *)cskb;
	struct net_device *dev = (struct net_device *)cdev;
	if (!traced_dev(dev))
		return 0;
	// A device without a qdisc (noqueue, a veth's default) queues nothing and
	// stamps nothing: its packets are not looked up. Plain loads, no helper.
	struct Qdisc *root = dev->qdisc;
	if (!root || !root->enqueue)
		return 0;
	u32 ifindex = dev->ifindex, zero = 0;
	u64 segs = segs_of(skb);
	// The tx queue's qdisc: an mq's child, or the root every queue shares. _tx
	// is an array, which the verifier does not let a typed pointer index.
	u32 idx = skb->queue_mapping;
	if (idx >= dev->num_tx_queues)
		return 0;
	struct netdev_queue *txq = (struct netdev_queue *)((char *)dev->_tx + (u64)idx * bpf_core_type_size(struct netdev_queue));
	struct Qdisc *q = BPF_CORE_READ(txq, qdisc);
	if (!q || !BPF_CORE_READ(q, enqueue))
		return 0; // noqueue under the root: no qdisc to pass
	u32 handle = BPF_CORE_READ(q, handle), parent = BPF_CORE_READ(q, parent);
	conn_add(skb, ifindex, idx, handle, parent, segs);
	struct credit *c = bpf_map_lookup_elem(&credits, &zero);
	if (c && c->ifindex != ifindex)
		c = 0;
	u64 key = (u64)skb;
	struct stamp *s = bpf_map_lookup_elem(&stamps, &key);
	if (s) {
		u64 q = s->qdisc;
		bpf_map_delete_elem(&stamps, &key);
		if (q == DEQUEUED || q == 0) {
			// Sent whole (segs of the credit), or a segment stamped as cut.
			u64 used = q == DEQUEUED ? segs : 1;
			if (c)
				c->segs -= used < c->segs ? used : c->segs;
			return 0;
		}
	} else if (c && c->segs > 0) {
		c->segs--; // a segment of a dequeued GSO skb, cut on its way here
		return 0;
	}
	struct hist *h = hist_at(ifindex, handle, parent, CLASS_ALL);
	if (!h)
		return 0;
	h->count[0] += segs;
	h->bypassed += segs;
	if (is_echo(skb))
		echo_add(ifindex, handle, parent, 0);
	return 0;
}

// The longest list of segments stamped: a 64 KB GSO skb of 1448-byte segments is
// 46 of them; a longer list's tail is left unstamped.
#define MAX_SEGS 128

SEC("fexit/__skb_gso_segment")
int BPF_PROG(on_segment, struct sk_buff *skb, u64 features, _Bool tx_path, struct sk_buff *segs)
{
	// An ERR_PTR is the top 4095 addresses; NULL is no segmentation.
	if (!segs || (unsigned long)segs >= (unsigned long)-4095 || !traced_dev(skb->dev))
		return 0;
	struct stamp s = {.ns = bpf_ktime_get_ns(), .qdisc = 0};
	for (int i = 0; i < MAX_SEGS && segs; i++) {
		u64 key = (u64)segs;
		bpf_map_update_elem(&stamps, &key, &s, BPF_ANY);
		segs = segs->next;
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
