/* SPDX-License-Identifier: MIT */
#include "config.h"

#define FUSE_USE_VERSION 314
#include <fuse_log.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "log.h"

/* Written once before the session loop starts its threads, read afterwards. */
static int use_syslog;

static void emit(int prio, const char *line)
{
	if (use_syslog) {
		syslog(prio, "%s", line);
		return;
	}
	/* One fprintf per line keeps lines from concurrent threads whole. */
	fprintf(stderr, "placefs: %s\n", line);
}

static void fuse_log_hook(enum fuse_log_level level, const char *fmt, va_list ap)
{
	char buf[1024];
	size_t len;

	vsnprintf(buf, sizeof(buf), fmt, ap);
	len = strlen(buf);
	while (len > 0 && buf[len - 1] == '\n')
		buf[--len] = '\0';
	if (len == 0)
		return;
	/* libfuse levels are syslog priorities by design. */
	emit((int)level, buf);
}

void placefs_log_to_syslog(int on)
{
	use_syslog = on;
	if (on) {
		openlog("placefs", LOG_PID, LOG_DAEMON);
		fuse_set_log_func(fuse_log_hook);
	}
}

void placefs_log(int prio, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	emit(prio, buf);
}

void placefs_log_lines(int prio, const char *text)
{
	const char *p = text;

	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		char buf[2048];

		if (len >= sizeof(buf))
			len = sizeof(buf) - 1;
		memcpy(buf, p, len);
		buf[len] = '\0';
		if (len > 0)
			emit(prio, buf);
		if (!nl)
			break;
		p = nl + 1;
	}
}

void placefs_log_limited(struct placefs_log_limit *l, int prio, const char *fmt, ...)
{
	char buf[2048];
	uint64_t now = placefs_clock_ns(), held = 0;
	bool ok = false;
	va_list ap;

	pthread_mutex_lock(&l->lock);
	if (l->last_ns == 0) {
		l->last_ns = now;
	} else if (now - l->last_ns >= PLACEFS_LOG_LIMIT_NS) {
		uint64_t add = (now - l->last_ns) / PLACEFS_LOG_LIMIT_NS;

		l->tokens = l->tokens + add > PLACEFS_LOG_LIMIT_BURST ? PLACEFS_LOG_LIMIT_BURST
		                                                      : l->tokens + add;
		l->last_ns += add * PLACEFS_LOG_LIMIT_NS;
	}
	if (l->tokens > 0) {
		l->tokens--;
		ok = true;
		held = l->held;
		l->held = 0;
	} else {
		l->held++;
		if (l->suppressed)
			atomic_fetch_add_explicit(l->suppressed, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&l->lock);
	if (!ok)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (held)
		placefs_log(prio, "%s (%llu similar line%s suppressed)", buf,
		            (unsigned long long)held, held == 1 ? "" : "s");
	else
		emit(prio, buf);
}

void placefs_log_limit_flush(struct placefs_log_limit *l, const char *what)
{
	uint64_t held;

	pthread_mutex_lock(&l->lock);
	held = l->held;
	l->held = 0;
	pthread_mutex_unlock(&l->lock);
	if (held)
		placefs_log(LOG_NOTICE, "%llu %s line%s suppressed by the rate limit",
		            (unsigned long long)held, what, held == 1 ? "" : "s");
}
