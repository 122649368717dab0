#pragma once
// The encoder role's model: a checkpoint's mmproj run by llama.cpp's libmtmd (its CLIP / SigLIP towers and
// projectors), or the reference model's seeded toy tower. A library of its own (epd_vision) because only the
// encoder runs a tower: everything else lays images out from the mmproj's header alone (mmproj.hpp).
#include <memory>

#include "epd/model/config.hpp"
#include "epd/model/runner.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

// cfg.mmproj through libmtmd, with only the language model's vocabulary loaded (no weights): every image
// is tokenized by mtmd itself and its layout checked against media_layout() (an internal error naming both
// if they differ), then each image chunk encoded; the rows come back in chunk order. Without an mmproj:
// make_image_encoder(cfg). config_error for an mmproj epd does not serve (read_mmproj_info), one that does
// not fit the language model, or a file libmtmd cannot load.
protocol::Result<std::unique_ptr<ImageEncoder>> make_vision_encoder(const ModelConfig& cfg);

// The runner of cfg with the vision encoder above when cfg has an mmproj (epd-run, colocated tests).
protocol::Result<std::unique_ptr<ModelRunner>> make_vision_runner(const ModelConfig& cfg);

}  // namespace epd::model
