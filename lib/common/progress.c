/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/progress.h"
#include "common/size.h"

#define NS_PER_S 1000000000ULL

struct placefs_progress {
	FILE *f;
	char *label;
	uint64_t total, done;
	uint64_t start_ns, last_draw_ns;
	placefs_progress_clock_fn clock;
	void *clock_arg;
	int enabled;
	int drawn; /* drawn since the last clear (or ever) */
	int finished;
};

/* "M:SS" below an hour, else "H:MM:SS". */
static void format_duration(uint64_t s, char *buf, size_t len)
{
	if (s < 3600)
		snprintf(buf, len, "%" PRIu64 ":%02" PRIu64, s / 60, s % 60);
	else
		snprintf(buf, len, "%" PRIu64 ":%02" PRIu64 ":%02" PRIu64, s / 3600, s / 60 % 60,
		         s % 60);
}

size_t placefs_progress_format(char *buf, size_t len, const char *label, uint64_t done,
                               uint64_t total, uint64_t elapsed_ns, int final)
{
	char bar[PLACEFS_PROGRESS_BAR + 1], hdone[32], htotal[32], hrate[40], tbuf[48], dur[32];
	uint64_t filled, pct;
	int n;

	if (!label)
		label = "";
	if (done > total)
		done = total;
	if (total == 0) {
		filled = PLACEFS_PROGRESS_BAR;
		pct = 100;
	} else {
		filled = (uint64_t)((unsigned __int128)done * PLACEFS_PROGRESS_BAR / total);
		pct = (uint64_t)((unsigned __int128)done * 100 / total);
	}
	memset(bar, '#', (size_t)filled);
	memset(bar + filled, '.', PLACEFS_PROGRESS_BAR - (size_t)filled);
	bar[PLACEFS_PROGRESS_BAR] = '\0';
	placefs_size_format(done, hdone, sizeof(hdone));
	placefs_size_format(total, htotal, sizeof(htotal));
	if (elapsed_ns == 0) {
		snprintf(hrate, sizeof(hrate), "--");
	} else {
		unsigned __int128 r = (unsigned __int128)done * NS_PER_S / elapsed_ns;

		placefs_size_format(r > UINT64_MAX ? UINT64_MAX : (uint64_t)r, hrate,
		                    sizeof(hrate));
	}
	if (final) {
		format_duration(elapsed_ns / NS_PER_S, dur, sizeof(dur));
		snprintf(tbuf, sizeof(tbuf), "in %s", dur);
	} else if (done == 0 || elapsed_ns == 0) {
		snprintf(tbuf, sizeof(tbuf), "ETA --:--");
	} else {
		unsigned __int128 left = (unsigned __int128)(total - done) * elapsed_ns / done;
		unsigned __int128 s = (left + NS_PER_S - 1) / NS_PER_S;

		format_duration(s > UINT64_MAX ? UINT64_MAX : (uint64_t)s, dur, sizeof(dur));
		snprintf(tbuf, sizeof(tbuf), "ETA %s", dur);
	}
	n = snprintf(buf, len, "%s%s[%s] %3" PRIu64 "%%  %s/%s  %s/s  %s", label, *label ? " " : "",
	             bar, pct, hdone, htotal, hrate, tbuf);
	return n < 0 ? 0 : (size_t)n;
}

static uint64_t default_clock(void *arg)
{
	(void)arg;
	return placefs_clock_ns();
}

int placefs_progress_create(FILE *f, uint64_t total, const char *label, int enabled,
                            placefs_progress_clock_fn clock, void *clock_arg,
                            struct placefs_progress **out, struct placefs_error *err)
{
	struct placefs_progress *p;

	if (!f || !out)
		return placefs_error_set(err, -EINVAL, PLACEFS_E_USAGE,
		                         "placefs_progress_create: no stream or no result pointer");
	p = calloc(1, sizeof(*p));
	if (!p || !(p->label = strdup(label ? label : ""))) {
		free(p);
		return placefs_error_set(err, -ENOMEM, PLACEFS_E_NOMEM,
		                         "out of memory for a progress bar");
	}
	p->f = f;
	p->total = total;
	p->clock = clock ? clock : default_clock;
	p->clock_arg = clock ? clock_arg : NULL;
	if (enabled < 0) {
		int fd = fileno(f);

		enabled = fd >= 0 && isatty(fd) == 1;
	}
	p->enabled = enabled != 0;
	p->start_ns = p->clock(p->clock_arg);
	*out = p;
	return 0;
}

int placefs_progress_enabled(const struct placefs_progress *p)
{
	return p && p->enabled;
}

static void draw(struct placefs_progress *p, uint64_t now, int final)
{
	char line[512];
	size_t n;
	struct winsize ws;
	uint64_t elapsed = now > p->start_ns ? now - p->start_ns : 0;

	n = placefs_progress_format(line, sizeof(line), p->label, p->done, p->total, elapsed,
	                            final);
	if (n >= sizeof(line))
		n = sizeof(line) - 1;
	/* A line wider than the terminal would wrap, and "\r" would no longer redraw it. */
	if (ioctl(fileno(p->f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && n >= ws.ws_col)
		n = (size_t)ws.ws_col - 1;
	fputc('\r', p->f);
	fwrite(line, 1, n, p->f);
	fputs(final ? "\033[K\n" : "\033[K", p->f);
	fflush(p->f);
	p->last_draw_ns = now;
	p->drawn = 1;
}

void placefs_progress_update(struct placefs_progress *p, uint64_t nbytes)
{
	uint64_t now;

	if (!p || p->finished)
		return;
	if (__builtin_add_overflow(p->done, nbytes, &p->done))
		p->done = UINT64_MAX;
	if (!p->enabled)
		return;
	now = p->clock(p->clock_arg);
	if (!p->drawn || now - p->last_draw_ns >= PLACEFS_PROGRESS_INTERVAL_NS)
		draw(p, now, 0);
}

void placefs_progress_clear(struct placefs_progress *p)
{
	if (!p || !p->enabled || p->finished || !p->drawn)
		return;
	fputs("\r\033[K", p->f);
	fflush(p->f);
	p->drawn = 0;
}

void placefs_progress_finish(struct placefs_progress *p)
{
	if (!p || p->finished)
		return;
	p->finished = 1;
	if (p->enabled)
		draw(p, p->clock(p->clock_arg), 1);
}

void placefs_progress_free(struct placefs_progress *p)
{
	if (!p)
		return;
	free(p->label);
	free(p);
}
