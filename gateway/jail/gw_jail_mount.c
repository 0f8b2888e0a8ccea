/*  gw_jail_mount - the minimal root a jailed QEMU sees (see gw_jail_mount.h). */
#include "jail/gw_jail_mount.h"
#include "base/gw_mem.h"
#include "base/gw_runout.h"

#include <assert.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_MAX_ENTRIES 512
#define S_MAX_DEPTH 16                          //  symlinks followed for one path
#define S_LIST_MS 10000                         //  the loader listing a binary's libraries

struct _gw_jail_mount_t {
    char root [PATH_MAX];
    gw_jm_entry_t e [S_MAX_ENTRIES];
    size_t n;
};

gw_jail_mount_t *
gw_jail_mount_new (const char *root)
{
    assert (root && root [0] == '/');
    gw_jail_mount_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    snprintf (self->root, sizeof self->root, "%s", root);
    return self;
}

void
gw_jail_mount_destroy (gw_jail_mount_t **self_p)
{
    assert (self_p);
    gw_jail_mount_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->n; i++) {
        free ((char *) self->e [i].path);
        free ((char *) self->e [i].target);
        free ((char *) self->e [i].link);
    }
    free (self);
    *self_p = NULL;
}

size_t
gw_jail_mount_size (const gw_jail_mount_t *self)
{
    assert (self);
    return self->n;
}

const gw_jm_entry_t *
gw_jail_mount_entry (const gw_jail_mount_t *self, size_t i)
{
    assert (self && i < self->n);
    return &self->e [i];
}

bool
gw_jail_mount_covered (const gw_jail_mount_t *self, const char *path)
{
    assert (self && path);
    for (size_t i = 0; i < self->n; i++) {
        size_t len = strlen (self->e [i].path);
        if (self->e [i].kind == GW_JM_TREE && strncmp (path, self->e [i].path, len) == 0
        &&  (path [len] == '/' || !path [len]))
            return true;
    }
    return false;
}

//  Add an entry unless its path is planned already. 0 or -E2BIG/-EEXIST.
static int
s_add (gw_jail_mount_t *self, gw_jm_kind_t kind, const char *path, const char *link,
       unsigned long remount)
{
    assert (kind != GW_JM_NODE || !link);
    for (size_t i = 0; i < self->n; i++)
        if (strcmp (self->e [i].path, path) == 0)
            return self->e [i].kind == kind ? 0 : -EEXIST;
    if (self->n == S_MAX_ENTRIES)
        return -E2BIG;
    char target [PATH_MAX * 2];
    snprintf (target, sizeof target, "%s%s", self->root, path);
    self->e [self->n++] = (gw_jm_entry_t) { kind, gw_strdup (path), gw_strdup (target),
                                            gw_strdup (link), remount, 0, 0, 0 };
    return 0;
}

//  The remount flags of a bind of path: read-only when ro, always nosuid,
//  and the source mount's nodev/noexec kept (a user namespace may not
//  clear them). A rw bind with nothing to add is not remounted.
static unsigned long
s_remount_flags (const char *path, bool ro)
{
    struct statvfs vfs;
    unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | (ro ? MS_RDONLY : 0);
    if (statvfs (path, &vfs) == 0) {
        flags |= vfs.f_flag & ST_NODEV ? MS_NODEV : 0;
        flags |= vfs.f_flag & ST_NOEXEC ? MS_NOEXEC : 0;
        flags |= vfs.f_flag & ST_RDONLY ? MS_RDONLY : 0;
        flags |= vfs.f_flag & ST_NOSUID ? MS_NOSUID : 0;
    }
    return flags;
}

//  The next component of *p (skipping slashes) into comp; false at the end.
static bool
s_next_component (const char **p, char *comp, size_t cap)
{
    while (**p == '/')
        (*p)++;
    size_t len = strcspn (*p, "/");
    if (!len || len >= cap)
        return false;
    memcpy (comp, *p, len);
    comp [len] = '\0';
    *p += len;
    return true;
}

static int s_mirror (gw_jail_mount_t *self, const char *path, bool tree, bool ro, int depth);

//  cur is a symlink: copy it, then plan what it points to plus rest.
static int
s_follow (gw_jail_mount_t *self, const char *cur, const char *rest, bool tree, bool ro,
          int depth)
{
    char link [PATH_MAX], next [PATH_MAX * 2 + 2];
    ssize_t n = readlink (cur, link, sizeof link - 1);
    if (n <= 0)
        return n < 0 ? -errno : -EINVAL;
    link [n] = '\0';
    int rc = s_add (self, GW_JM_SYMLINK, cur, link, 0);
    if (rc < 0)
        return rc;
    if (link [0] == '/')
        snprintf (next, sizeof next, "%s%s", link, rest);
    else {
        const char *slash = strrchr (cur, '/');
        snprintf (next, sizeof next, "%.*s/%s%s", (int) (slash - cur), cur, link, rest);
    }
    if (strlen (next) >= PATH_MAX)
        return -ENAMETOOLONG;
    return s_mirror (self, next, tree, ro, depth + 1);
}

//  Plan path component by component; see the header.
static int
s_mirror (gw_jail_mount_t *self, const char *path, bool tree, bool ro, int depth)
{
    if (depth > S_MAX_DEPTH)
        return -ELOOP;
    char cur [PATH_MAX] = "", comp [NAME_MAX + 1];
    const char *p = path;
    while (s_next_component (&p, comp, sizeof comp)) {
        if (strcmp (comp, ".") == 0)
            continue;
        if (strcmp (comp, "..") == 0) {
            char *slash = strrchr (cur, '/');
            if (slash)
                *slash = '\0';
            continue;
        }
        size_t len = strlen (cur);
        if (len + strlen (comp) + 2 > sizeof cur)
            return -ENAMETOOLONG;
        snprintf (cur + len, sizeof cur - len, "/%s", comp);
        if (gw_jail_mount_covered (self, cur))
            return 0;
        struct stat st;
        if (lstat (cur, &st) < 0)
            return -errno;
        bool last = p [strspn (p, "/")] == '\0';
        if (S_ISLNK (st.st_mode))
            return s_follow (self, cur, p, tree, ro, depth);
        if (last)
            return s_add (self, tree ? GW_JM_TREE : GW_JM_FILE, cur, NULL,
                          s_remount_flags (cur, ro));
        if (!S_ISDIR (st.st_mode))
            return -ENOTDIR;
        int rc = s_add (self, GW_JM_DIR, cur, NULL, 0);
        if (rc < 0)
            return rc;
    }
    return -EINVAL;                             //  "/" itself, or a component too long
}

int
gw_jail_mount_add (gw_jail_mount_t *self, const char *path, bool tree, bool ro)
{
    assert (self && path);
    if (path [0] != '/')
        return -EINVAL;
    return s_mirror (self, path, tree, ro, 0);
}

int
gw_jail_mount_add_node (gw_jail_mount_t *self, const char *path, dev_t dev, unsigned uid,
                        unsigned gid)
{
    assert (self && path);
    char cur [PATH_MAX] = "", comp [NAME_MAX + 1];
    const char *p = path;
    if (path [0] != '/' || strlen (path) >= sizeof cur)
        return -EINVAL;
    while (s_next_component (&p, comp, sizeof comp)) {
        size_t len = strlen (cur);
        snprintf (cur + len, sizeof cur - len, "/%s", comp);
        bool last = p [strspn (p, "/")] == '\0';
        if (gw_jail_mount_covered (self, cur))
            return -EEXIST;                     //  a bind there would hide the node
        int rc = s_add (self, last ? GW_JM_NODE : GW_JM_DIR, cur, NULL, 0);
        if (rc < 0)
            return rc;
        if (last) {
            gw_jm_entry_t *e = &self->e [self->n - 1];
            e->dev = dev;
            e->uid = uid;
            e->gid = gid;
        }
    }
    return 0;
}

//  ==========================================================================
//  The libraries: ld.so's own list ("name => /path (0x...)" or "/path (0x...)").

static int
s_add_lib (char ***libs, size_t *n, const char *line)
{
    const char *arrow = strstr (line, "=> ");
    const char *start = arrow ? arrow + 3 : line + strspn (line, " \t");
    if (*start != '/')
        return 0;
    size_t len = strcspn (start, " \t\n");
    char **grown = realloc (*libs, (*n + 2) * sizeof **libs);
    if (!grown)
        abort ();
    *libs = grown;
    (*libs) [*n] = strndup (start, len);
    (*libs) [++*n] = NULL;
    return 0;
}

//  exe's ELF interpreter (PT_INTERP) into out; -ENOEXEC for a static (or
//  non-ELF) file, -errno when it cannot be read.
static int
s_interp (const char *exe, char *out, size_t cap)
{
    int fd = open (exe, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    Elf64_Ehdr eh;
    int rc = -ENOEXEC;
    if (pread (fd, &eh, sizeof eh, 0) == (ssize_t) sizeof eh
    &&  memcmp (eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident [EI_CLASS] == ELFCLASS64
    &&  eh.e_phentsize == sizeof (Elf64_Phdr))
        for (unsigned i = 0; i < eh.e_phnum && rc == -ENOEXEC; i++) {
            Elf64_Phdr ph;
            if (pread (fd, &ph, sizeof ph, (off_t) (eh.e_phoff + i * sizeof ph))
                != (ssize_t) sizeof ph)
                break;
            if (ph.p_type == PT_INTERP && ph.p_filesz > 1 && ph.p_filesz <= cap
            &&  pread (fd, out, ph.p_filesz, (off_t) ph.p_offset) == (ssize_t) ph.p_filesz) {
                out [ph.p_filesz - 1] = '\0';
                rc = 0;
            }
        }
    close (fd);
    return rc;
}

char **
gw_jail_mount_libs (const char *exe)
{
    assert (exe);
    char interp [PATH_MAX];
    int rc = s_interp (exe, interp, sizeof interp);
    if (rc == -ENOEXEC) {                       //  static: nothing to load
        char **none = calloc (1, sizeof *none);
        if (!none)
            abort ();
        return none;
    }
    if (rc < 0)
        return NULL;
    //  What ldd does: the loader lists exe's libraries, and never runs exe.
    char *argv [] = { interp, "--list", (char *) exe, NULL }, *envp [] = { NULL };
    char buf [16384];
    rc = gw_runout (argv, envp, buf, sizeof buf, S_LIST_MS);
    char **libs = calloc (1, sizeof *libs);
    size_t n = 0;
    for (char *save = NULL, *line = strtok_r (buf, "\n", &save); libs && rc == 0 && line;
         line = strtok_r (NULL, "\n", &save))
        s_add_lib (&libs, &n, line);
    if (rc != 0 || n == 0) {
        for (size_t i = 0; libs && libs [i]; i++)
            free (libs [i]);
        free (libs);
        return NULL;
    }
    return libs;
}

//  ==========================================================================
//  Child side: async-signal-safe calls only.

static int
s_make_entry (const gw_jm_entry_t *e)
{
    int fd;
    switch (e->kind) {
        case GW_JM_DIR:
            return mkdir (e->target, 0755) < 0 && errno != EEXIST ? -errno : 0;
        case GW_JM_SYMLINK:
            return symlink (e->link, e->target) < 0 && errno != EEXIST ? -errno : 0;
        case GW_JM_TREE:
            if (mkdir (e->target, 0755) < 0 && errno != EEXIST)
                return -errno;
            break;
        case GW_JM_FILE:
            fd = open (e->target, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
            if (fd < 0)
                return -errno;
            close (fd);
            break;
        case GW_JM_NODE:
            if (mknod (e->target, S_IFCHR | 0600, e->dev) < 0
            ||  chown (e->target, e->uid, e->gid) < 0)
                return -errno;
            return 0;
    }
    if (mount (e->path, e->target, NULL, MS_BIND, NULL) < 0)
        return -errno;
    if (e->remount && mount (NULL, e->target, NULL, e->remount, NULL) < 0)
        return -errno;
    return 0;
}

static int s_apply (const gw_jail_mount_t *self, int *step);

int
gw_jail_mount_apply (const gw_jail_mount_t *self, int *step)
{
    *step = -1;
    //  The tree's modes are ours, whatever the gateway's umask (a server's
    //  077 would lock the VM's uid out of its own root); QEMU gets it back.
    mode_t mask = umask (0);
    int rc = s_apply (self, step);
    umask (mask);
    return rc;
}

static int
s_apply (const gw_jail_mount_t *self, int *step)
{
    //  Nothing we mount may reach the host's namespace.
    if (mount (NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0
    ||  mount ("cellvm-jail", self->root, "tmpfs", MS_NOSUID, "mode=0755,size=1m,nr_inodes=4096")
        < 0)
        return -errno;
    for (size_t i = 0; i < self->n; i++) {
        *step = (int) i;
        int rc = s_make_entry (&self->e [i]);
        if (rc < 0)
            return rc;
    }
    *step = (int) self->n;
    //  pivot_root (".", "."): the old root is stacked under the new one,
    //  then detached; nothing of the host is left to reach.
    if (chdir (self->root) < 0 || syscall (SYS_pivot_root, ".", ".") < 0
    ||  umount2 (".", MNT_DETACH) < 0 || chdir ("/") < 0
    ||  mount (NULL, "/", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, NULL) < 0)
        return -errno;
    return 0;
}
