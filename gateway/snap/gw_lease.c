/*  gw_lease - a named session's lease in the snapshot store (gw_lease.h). */
#include "snap/gw_lease.h"
#include "ch_io.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_TAKE_TRIES 4
#define S_FILE_MAX 4096

struct _gw_lease_t {
    char dir [PATH_MAX];                        //  STORE/.leases
    char name [GW_LEASE_NAME_MAX + 1];
    char host [128];
    char token [33];
    int epoch;
    double ttl, renewed, expires;
    bool lost;
};

//  What a lease file says; epoch 0 when unreadable.
typedef struct {
    char host [128], token [33];
    long long pid;
    double renewed, expires;
    bool released;
} s_said_t;

bool
gw_lease_name_ok (const char *name)
{
    size_t n = name ? strlen (name) : 0;
    if (n == 0 || n > GW_LEASE_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name [i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
           || c == '_' || c == '-'))
            return false;
    }
    return true;
}

//  "<name>.<digits>" of ours: the epoch, else 0.
static int
s_epoch_of (const char *entry, const char *name)
{
    size_t n = strlen (name);
    if (strncmp (entry, name, n) != 0 || entry [n] != '.' || !entry [n + 1])
        return 0;
    long long v = 0;
    for (const char *p = entry + n + 1; *p; p++) {
        if (*p < '0' || *p > '9' || v > INT_MAX / 10)
            return 0;
        v = v * 10 + (*p - '0');
    }
    return v > 0 && v < INT_MAX ? (int) v : 0;
}

//  The highest epoch of name (0: none); with below, remove the older ones.
static int
s_scan (const char *dir, const char *name, int below)
{
    DIR *d = opendir (dir);
    if (!d)
        return -errno;
    int top = 0;
    struct dirent *e;
    while ((e = readdir (d))) {
        int ep = s_epoch_of (e->d_name, name);
        if (ep > top)
            top = ep;
        if (ep > 0 && ep < below)
            unlinkat (dirfd (d), e->d_name, 0);
    }
    closedir (d);
    return top;
}

static int
s_read (const char *dir, const char *name, int epoch, s_said_t *out)
{
    char path [PATH_MAX + 80], text [S_FILE_MAX];
    snprintf (path, sizeof path, "%s/%s.%d", dir, name, epoch);
    memset (out, 0, sizeof *out);
    int fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    ssize_t n = read (fd, text, sizeof text - 1);
    close (fd);
    if (n < 0)
        return -EIO;
    text [n] = '\0';
    json_t *j = json_loads (text, 0, NULL);
    const char *host = json_string_value (json_object_get (j, "host"));
    const char *token = json_string_value (json_object_get (j, "token"));
    json_t *exp = json_object_get (j, "expires");
    int rc = j && host && token && json_is_number (exp) ? 0 : -EBADMSG;
    if (rc == 0) {
        snprintf (out->host, sizeof out->host, "%s", host);
        snprintf (out->token, sizeof out->token, "%s", token);
        out->pid = json_integer_value (json_object_get (j, "pid"));
        out->renewed = json_number_value (json_object_get (j, "renewed"));
        out->expires = json_number_value (exp);
        out->released = json_is_true (json_object_get (j, "released"));
    }
    json_decref (j);
    return rc;
}

//  Our lease's text in a new temporary file of dir; its path in tmp.
static int
s_write_tmp (const gw_lease_t *self, bool released, char *tmp, size_t cap)
{
    snprintf (tmp, cap, "%s/.%s.%s.tmp", self->dir, self->name, self->token);
    json_t *j = json_pack ("{s:i, s:s, s:s, s:I, s:s, s:i, s:f, s:f, s:f, s:b}",
                           "format", 1, "name", self->name, "host", self->host,
                           "pid", (json_int_t) getpid (), "token", self->token,
                           "epoch", self->epoch, "ttl_s", self->ttl,
                           "renewed", self->renewed, "expires", released ? 0.0 : self->expires,
                           "released", released);
    char *text = json_dumps (j, JSON_COMPACT);
    json_decref (j);
    if (!text)
        abort ();
    unlink (tmp);
    int fd = open (tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int rc = fd < 0 ? -errno : ch_write_bytes (fd, text, strlen (text));
    if (rc == 0 && fsync (fd) < 0)
        rc = -errno;
    if (fd >= 0 && close (fd) < 0 && rc == 0)
        rc = -errno;
    free (text);
    if (rc < 0)
        unlink (tmp);
    return rc;
}

static void
s_sync_dir (const char *dir)
{
    int fd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync (fd);
        close (fd);
    }
}

//  link(tmp, epoch's name): 0, -EEXIST when another got there first. NFS
//  may report a link that a retransmission made as failed: the link count
//  of tmp says what happened.
static int
s_link_epoch (gw_lease_t *self, const char *tmp)
{
    char path [PATH_MAX + 80];
    snprintf (path, sizeof path, "%s/%s.%d", self->dir, self->name, self->epoch);
    int rc = link (tmp, path) == 0 ? 0 : -errno;
    struct stat st;
    if (rc < 0 && rc != -EEXIST && stat (tmp, &st) == 0 && st.st_nlink == 2)
        rc = 0;
    unlink (tmp);
    if (rc == 0)
        s_sync_dir (self->dir);
    return rc;
}

static void
s_say_held (const s_said_t *h, const char *name, int epoch, double now, char *err,
            size_t errlen)
{
    snprintf (err, errlen, "session \"%s\" is running on host %s (pid %lld): its lease "
              "(epoch %d) was renewed %.0f s ago and holds for %.0f s more. Stop it there "
              "first (SIGTERM suspends it into the store), or, if that host is gone, "
              "start again once the lease has expired", name, h->host, h->pid, epoch,
              now - h->renewed, h->expires + GW_LEASE_SKEW_S - now);
}

//  One try: 0 taken, -EAGAIN when another host raced us, -EBUSY when held.
static int
s_try_take (gw_lease_t *self, double now, char *err, size_t errlen)
{
    int top = s_scan (self->dir, self->name, 0);
    if (top < 0)
        return top;
    s_said_t said;
    if (top > 0) {
        int rc = s_read (self->dir, self->name, top, &said);
        if (rc == -ENOENT)
            return -EAGAIN;
        bool live = rc == 0 && !said.released && now < said.expires + GW_LEASE_SKEW_S;
        if (live) {
            s_say_held (&said, self->name, top, now, err, errlen);
            return -EBUSY;
        }
    }
    self->epoch = top + 1;
    self->renewed = now;
    self->expires = now + self->ttl;
    char tmp [PATH_MAX + 120];
    int rc = s_write_tmp (self, false, tmp, sizeof tmp);
    if (rc == 0)
        rc = s_link_epoch (self, tmp);
    if (rc == -EEXIST)
        return -EAGAIN;
    if (rc == 0)
        s_scan (self->dir, self->name, self->epoch);
    return rc;
}

static int
s_new_token (char out [33])
{
    unsigned char raw [16];
    if (getrandom (raw, sizeof raw, 0) != (ssize_t) sizeof raw)
        return -EIO;
    for (int i = 0; i < 16; i++)
        snprintf (out + 2 * i, 3, "%02x", raw [i]);
    return 0;
}

gw_lease_t *
gw_lease_take (const char *store, const char *name, const char *host, double ttl_s,
               double now, int *rc_p, char *err, size_t errlen)
{
    assert (store && host && rc_p && err);
    gw_lease_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    int rc = -EINVAL;
    if (!gw_lease_name_ok (name) || !(ttl_s >= 3 && ttl_s <= 86400)) {
        snprintf (err, errlen, "session name \"%.80s\" or lease time %g s is not valid: use "
                  "[A-Za-z0-9_-]{1,%d} and 3..86400 s", name ? name : "", ttl_s,
                  GW_LEASE_NAME_MAX);
        goto fail;
    }
    snprintf (self->dir, sizeof self->dir, "%s/" GW_LEASE_DIR, store);
    snprintf (self->name, sizeof self->name, "%s", name);
    snprintf (self->host, sizeof self->host, "%s", host);
    self->ttl = ttl_s;
    if ((rc = s_new_token (self->token)) < 0
    ||  (mkdir (self->dir, 0700) < 0 && errno != EEXIST && (rc = -errno))) {
        snprintf (err, errlen, "cannot make %s: %s", self->dir, strerror (-rc));
        goto fail;
    }
    rc = -EAGAIN;
    for (int i = 0; i < S_TAKE_TRIES && rc == -EAGAIN; i++)
        rc = s_try_take (self, now, err, errlen);
    if (rc == 0)
        return self;
    if (rc == -EAGAIN) {
        rc = -EBUSY;
        snprintf (err, errlen, "session \"%s\": other hosts kept taking its lease at the same "
                  "time; try again", name);
    }
    else if (rc != -EBUSY)
        snprintf (err, errlen, "cannot write the lease of session \"%s\" in %s: %s", name,
                  self->dir, strerror (-rc));
fail:
    *rc_p = rc;
    free (self);
    return NULL;
}

int
gw_lease_renew (gw_lease_t *self, double now, char *err, size_t errlen)
{
    assert (self);
    if (self->lost)
        return -ESTALE;
    if (now < self->renewed + self->ttl / 3)
        return 0;
    int top = s_scan (self->dir, self->name, 0);
    if (top > self->epoch) {
        self->lost = true;
        s_said_t said;
        s_read (self->dir, self->name, top, &said);
        snprintf (err, errlen, "session \"%s\" was taken over by host %s (lease epoch %d, "
                  "ours %d): this host was judged gone", self->name, said.host [0] ? said.host
                  : "?", top, self->epoch);
        return -ESTALE;
    }
    double renewed = self->renewed, expires = self->expires;
    self->renewed = now;
    self->expires = now + self->ttl;
    char tmp [PATH_MAX + 120], path [PATH_MAX + 80];
    snprintf (path, sizeof path, "%s/%s.%d", self->dir, self->name, self->epoch);
    int rc = top < 0 ? top : s_write_tmp (self, false, tmp, sizeof tmp);
    if (rc == 0 && rename (tmp, path) < 0) {
        rc = -errno;
        unlink (tmp);
    }
    if (rc < 0) {
        self->renewed = renewed, self->expires = expires;
        snprintf (err, errlen, "cannot renew the lease of session \"%s\": %s", self->name,
                  strerror (-rc));
    }
    return rc;
}

bool
gw_lease_lapsed (const gw_lease_t *self, double now)
{
    return self->lost || now >= self->expires - GW_LEASE_SKEW_S;
}

int
gw_lease_epoch (const gw_lease_t *self)
{
    return self->epoch;
}

void
gw_lease_destroy (gw_lease_t **self_p)
{
    assert (self_p);
    gw_lease_t *self = *self_p;
    if (!self)
        return;
    char tmp [PATH_MAX + 120], path [PATH_MAX + 80];
    snprintf (path, sizeof path, "%s/%s.%d", self->dir, self->name, self->epoch);
    if (!self->lost && s_scan (self->dir, self->name, 0) == self->epoch
    &&  s_write_tmp (self, true, tmp, sizeof tmp) == 0 && rename (tmp, path) < 0)
        unlink (tmp);
    free (self);
    *self_p = NULL;
}
