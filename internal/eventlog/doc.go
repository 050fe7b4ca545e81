// Package eventlog reads Spark event logs line by line for
// `finalizer publish`: a plain file, an `.inprogress` file still being
// written, a rolling event log directory (`eventlog_v2_<appId>` holding
// `events_<N>_<appId>[.<codec>]` files), or standard input. Files may be
// uncompressed or zstd-compressed; Spark's other codecs (lz4, lzf, snappy)
// are refused with an error that says how to configure Spark instead.
//
// With Options.Follow the Reader tails a log that is still growing, the way
// `tail -f` does: it polls (every Options.Poll) for more bytes, for the
// rename of an `.inprogress` file to its final name, and for the next
// `events_N` file of a rolling directory. Polling needs no file-notification
// dependency, works on every file system Spark writes event logs to
// (including network mounts where inotify is silent), and costs one stat or
// one directory listing per interval while the log is idle.
//
// Streaming keeps the lines that matter to finalizer: the streaming query
// listener events (started, progress, idle, terminated).
package eventlog
