/*
 * spm.cc: the C bridge over sentencepiece::SentencePieceProcessor (see spm.h). Every C++
 * exception and util::Status is turned into a return code + message here.
 */
#include "spm.h"

#include <sentencepiece_processor.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <sys/stat.h>
#include <vector>

struct SpmProcessor {
    sentencepiece::SentencePieceProcessor proc;
};

static void spm_set_err(char* err, size_t errlen, const std::string& msg) {
    if (err && errlen) snprintf(err, errlen, "%s", msg.c_str());
}

// Walks the top-level protobuf fields of a ModelProto file (wire format only): every field must end
// inside the file, and a complete model has its pieces (field 1) followed by the normalizer_spec
// (field 3) that the trainer always writes after them. A prefix of a real model (a truncated copy)
// still parses in SentencePiece and gives wrong ids (issue 14); this refuses it.
static bool spm_file_complete(const std::vector<unsigned char>& b, std::string* why) {
    size_t i = 0, n = b.size();
    long pieces = 0;
    bool normalizer = false;
    auto varint = [&](uint64_t* v) -> bool {
        uint64_t r = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (i >= n) return false;
            unsigned char c = b[i++];
            r |= (uint64_t)(c & 0x7f) << shift;
            if (!(c & 0x80)) {
                *v = r;
                return true;
            }
        }
        return false;
    };
    while (i < n) {
        uint64_t tag, v;
        if (!varint(&tag)) { *why = "cut inside a field tag"; return false; }
        uint64_t field = tag >> 3;
        switch (tag & 7) {
            case 0: if (!varint(&v)) { *why = "cut inside a number"; return false; } break;
            case 1: if (n - i < 8) { *why = "cut inside a field"; return false; } i += 8; break;
            case 5: if (n - i < 4) { *why = "cut inside a field"; return false; } i += 4; break;
            case 2:
                if (!varint(&v)) { *why = "cut inside a length"; return false; }
                if (v > n - i) { *why = "truncated: a field runs past the end of the file"; return false; }
                i += (size_t)v;
                break;
            default: *why = "not protobuf data"; return false;
        }
        if (field == 1) pieces++;
        if (field == 3) normalizer = true;
    }
    if (pieces == 0) { *why = "no pieces"; return false; }
    if (!normalizer) { *why = "incomplete: it ends after " + std::to_string(pieces) + " pieces, without the normalizer spec (truncated?)"; return false; }
    return true;
}

extern "C" SpmProcessor* spm_load(const char* path, char* err, size_t errlen) {
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        spm_set_err(err, errlen, std::string("SentencePiece model not found: ") + (path ? path : "(null)"));
        return nullptr;
    }
    if (!S_ISREG(st.st_mode)) {
        spm_set_err(err, errlen, std::string("SentencePiece model is not a regular file: ") + path);
        return nullptr;
    }
    {
        std::vector<unsigned char> bytes;
        FILE* f = fopen(path, "rb");
        if (!f) {
            spm_set_err(err, errlen, std::string("cannot read SentencePiece model ") + path);
            return nullptr;
        }
        unsigned char buf[65536];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + got);
        bool rerr = ferror(f) != 0;
        fclose(f);
        std::string why;
        if (rerr) {
            spm_set_err(err, errlen, std::string("cannot read SentencePiece model ") + path);
            return nullptr;
        }
        if (!spm_file_complete(bytes, &why)) {
            spm_set_err(err, errlen, std::string("not a valid SentencePiece model: ") + path + " (" + why + ")");
            return nullptr;
        }
    }
    SpmProcessor* sp = new (std::nothrow) SpmProcessor();
    if (!sp) {
        spm_set_err(err, errlen, "out of memory loading SentencePiece model");
        return nullptr;
    }
    try {
        auto status = sp->proc.Load(path);
        if (!status.ok()) {
            spm_set_err(err, errlen, std::string("not a valid SentencePiece model: ") + path + " (" + status.ToString() + ")");
            delete sp;
            return nullptr;
        }
    } catch (const std::exception& e) {
        spm_set_err(err, errlen, std::string("not a valid SentencePiece model: ") + path + " (" + e.what() + ")");
        delete sp;
        return nullptr;
    }
    if (sp->proc.GetPieceSize() <= 0) {
        spm_set_err(err, errlen, std::string("SentencePiece model has no pieces: ") + path);
        delete sp;
        return nullptr;
    }
    return sp;
}

extern "C" void spm_free(SpmProcessor* sp) { delete sp; }

extern "C" int spm_vocab_size(const SpmProcessor* sp) { return sp->proc.GetPieceSize(); }

extern "C" const char* spm_id_to_piece(const SpmProcessor* sp, int id) {
    if (id < 0 || id >= sp->proc.GetPieceSize()) return nullptr;
    return sp->proc.IdToPiece(id).c_str();  // reference into the model proto: stable
}

extern "C" int spm_piece_to_id(const SpmProcessor* sp, const char* piece) { return sp->proc.PieceToId(piece); }
extern "C" int spm_unk_id(const SpmProcessor* sp) { return sp->proc.unk_id(); }
extern "C" bool spm_is_control(const SpmProcessor* sp, int id) { return sp->proc.IsControl(id); }
extern "C" bool spm_is_unknown(const SpmProcessor* sp, int id) { return sp->proc.IsUnknown(id); }

extern "C" int spm_encode(const SpmProcessor* sp, const char* text, size_t len, int32_t* out, int cap,
                          char* err, size_t errlen) {
    try {
        std::vector<int> ids;
        auto status = sp->proc.Encode(absl::string_view(text, len), &ids);
        if (!status.ok()) {
            spm_set_err(err, errlen, "SentencePiece encode failed: " + status.ToString());
            return -1;
        }
        if (ids.size() > (size_t)INT32_MAX) {
            spm_set_err(err, errlen, "SentencePiece encode: too many ids");
            return -1;
        }
        int n = (int)ids.size();
        for (int i = 0; i < n && i < cap; i++) out[i] = ids[i];
        return n;
    } catch (const std::exception& e) {
        spm_set_err(err, errlen, std::string("SentencePiece encode failed: ") + e.what());
        return -1;
    }
}

extern "C" int spm_decode(const SpmProcessor* sp, const int32_t* ids, int n, char* out, size_t cap,
                          char* err, size_t errlen) {
    try {
        std::vector<int> v(ids, ids + n);
        for (int id : v) {
            if (id < 0 || id >= sp->proc.GetPieceSize()) {
                spm_set_err(err, errlen, "SentencePiece decode: id " + std::to_string(id) + " out of range");
                return -1;
            }
        }
        std::string s;
        auto status = sp->proc.Decode(v, &s);
        if (!status.ok()) {
            spm_set_err(err, errlen, "SentencePiece decode failed: " + status.ToString());
            return -1;
        }
        if (cap) {
            size_t k = s.size() < cap - 1 ? s.size() : cap - 1;
            memcpy(out, s.data(), k);
            out[k] = 0;
        }
        return (int)s.size();
    } catch (const std::exception& e) {
        spm_set_err(err, errlen, std::string("SentencePiece decode failed: ") + e.what());
        return -1;
    }
}
