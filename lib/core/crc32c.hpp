// CRC-32C (Castagnoli, the polynomial 0x1EDC6F41 reflected), as iSCSI, ext4 and TFRecord files use
// it, and TFRecord's masked form of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace meg {

// CRC-32C of N bytes at DATA; "123456789" gives 0xE3069283.
uint32_t crc32c(const void* data, size_t n);
inline uint32_t crc32c(std::string_view bytes) { return crc32c(bytes.data(), bytes.size()); }

// TFRecord's mask, which keeps a CRC stored beside the data it covers from being the CRC of data
// that holds CRCs: rotate right by 15 bits and add 0xA282EAD8.
inline uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }
inline uint32_t masked_crc32c(std::string_view bytes) { return mask_crc32c(crc32c(bytes)); }

}  // namespace meg
