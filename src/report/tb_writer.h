/*
 * tb_writer.h: TensorBoard event files (what torch.utils.tensorboard's SummaryWriter, used by HF's
 * TensorBoardCallback, writes), serialized with protobuf-c (tb_event.proto) and framed by tb_record.
 *
 * The file is <logdir>/events.out.tfevents.<unix time, 10 digits>.<hostname>.<pid>.<n> (SummaryWriter's
 * name; TensorBoard picks up any file whose name contains "tfevents"). Its first event carries
 * file_version "brain.Event:2"; scalars are Summary values with simple_value (float32, as add_scalar writes
 * them), text is a DT_STRING tensor with plugin "text" (add_text). Every event is flushed at once, so a
 * TensorBoard watching the folder sees each step as it is logged and a crash loses nothing written.
 * Without protobuf-c at build time (T5_HAVE_PROTOBUF_C unset) tb_writer_open fails with one sentence.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TbWriter TbWriter;

// true when this build can write event files (protobuf-c was found).
bool tb_writer_available(void);

// Creates logdir (and parents) and a new event file in it, writes the file_version event. wall_time: seconds
// since the epoch (the time in the name and of the first event). NULL with a message in err on failure.
TbWriter* tb_writer_open(const char* logdir, double wall_time, char* err, size_t errcap);
// The event file's path.
const char* tb_writer_path(const TbWriter* w);
// One scalar event (stored as float32, as TensorBoard keeps scalars). 0, or -1 with a message in err.
int tb_writer_scalar(TbWriter* w, const char* tag, double value, int64_t step, double wall_time, char* err,
                     size_t errcap);
// One text event (TensorBoard's text plugin, add_text). 0, or -1 with a message in err.
int tb_writer_text(TbWriter* w, const char* tag, const char* text, int64_t step, double wall_time, char* err,
                   size_t errcap);
void tb_writer_close(TbWriter* w);

#ifdef __cplusplus
}
#endif
