# Reads a meg-retro-build matrix file (man/meg-formats.5), checking its header, as a list of rows;
# for the tests of meg-retro-build (tests/tools/test_meg_retro_build.sh, and on the GPU
# tests/gpu/test_retro_build_cuda.sh), which put this folder on PYTHONPATH.
import struct


def mat(path):
    b = open(path, "rb").read()
    assert b[:8] == b"MEGMATRX", path
    version, dtype, rows, cols = struct.unpack("<IIQQ", b[8:32])
    assert version == 1 and len(b) == 64 + rows * cols * {1: 2, 3: 4, 4: 8}[dtype], path
    v = struct.unpack("<%d%s" % (rows * cols, {1: "e", 3: "i", 4: "q"}[dtype]), b[64:])
    return [v[i * cols:(i + 1) * cols] for i in range(rows)]
