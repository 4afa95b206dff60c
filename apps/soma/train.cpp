// soma train: builds a model (by name or from a JSON config), trains it on a data set with the
// Keras progress bar and per-epoch validation, saves the model and a CSV of the metrics, and
// ends with the machine-readable line `test_loss=<x> test_accuracy=<y>`.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "common.hpp"

namespace soma::cli {

namespace {

ArgParser train_parser() {
  ArgParser p("soma train", "[options]",
              "Trains a classifier and saves it. Examples:\n"
              "  soma train --model mlp --epochs 5 --batch-size 32 --seed 1 --out mlp.soma\n"
              "  soma train --model cnn --epochs 5 --out cnn.soma\n"
              "  soma train --config my_model.json --data idx:DIR --epochs 3\n"
              "  soma train --model cnn --device cuda --out cnn.soma\n"
              "  mpirun -np 4 soma train --distributed --threads 1 --batch-size 256\n"
              "The last line printed is `test_loss=<x> test_accuracy=<y>`.");
  p.option("model", "NAME",
           "built-in model: mlp (Flatten, Dense 128 relu, Dense 128 relu, Dense 10), cnn (two\n"
           "Conv2D 3x3 + MaxPool blocks of 32 and 64 filters, Dense 128, Dense 10) or lenet\n"
           "(Conv2D 5x5x32 same, pool, Conv2D 5x5x64 same, pool, Dense 128, Dense 10);\n"
           "each starts with a Normalization adapted on the training images; default mlp")
      .option("config", "FILE.json",
              "the model's layers as JSON instead of --model: {\"layers\": [{\"type\": \"Dense\",\n"
              "\"units\": 128, \"activation\": \"relu\"}, ...]} (Keras' model config also works;\n"
              "Normalization layers are adapted on the training data)")
      .option("data", "SPEC", kDataHelp)
      .option("epochs", "N", "passes over the training data (default 5)")
      .option("batch-size", "N", "samples per training step (default 32)")
      .option("optimizer", "NAME", "adam (default), sgd, rmsprop, adagrad, nadam or adamw")
      .option("lr", "RATE", "learning rate (default: the optimiser's own, e.g. 0.001 for Adam)")
      .option("seed", "N", "seed for the weights and the shuffling (default 42)")
      .option("threads", "N", "CPU threads (default: all cores)")
      .option("device", "DEV", kDeviceHelp)
      .option("precision", "P", kPrecisionHelp)
      .option("out", "PATH", "where to save the model (default model.soma)")
      .option("csv", "PATH", "per-epoch metrics as CSV (default <out>.csv)")
      .option("validation-split", "F",
              "validate on this last fraction of the training data instead of the test set")
      .option("verbose", "N", "0 silent, 1 progress bar (default), 2 one line per epoch")
      .option("distributed", "",
              "data-parallel training over the processes of mpirun (docs/distributed.md):\n"
              "--batch-size is the global batch, split among them; rank 0 prints and saves");
  return p;
}

optim::OptimizerRef make_optimizer(const std::string& name, std::optional<double> lr) {
  auto with_lr = [&](auto options) {
    if (lr) options.learning_rate = *lr;
    return options;
  };
  if (name == "adam") return optim::Adam(with_lr(optim::AdamOptions{}));
  if (name == "sgd") return optim::SGD(with_lr(optim::SGDOptions{}));
  if (name == "rmsprop") return optim::RMSprop(with_lr(optim::RMSpropOptions{}));
  if (name == "adagrad") return optim::Adagrad(with_lr(optim::AdagradOptions{}));
  if (name == "nadam") return optim::Nadam(with_lr(optim::NadamOptions{}));
  return optim::AdamW(with_lr(optim::AdamWOptions{}));
}

}  // namespace

int cmd_train(int argc, char** argv) {
  const ArgParser parser = train_parser();
  Args a;
  if (parse_or_help(parser, argc, argv, a)) return 0;

  // Every value is checked before the (slow) data loading starts.
  if (a.has("model") && a.has("config"))
    throw UsageError("--model and --config exclude each other");
  const std::string model_name = a.choice("model", {"mlp", "cnn", "lenet"}, "mlp");
  const std::string data_spec = a.str("data", "fashion-mnist");
  const int epochs = static_cast<int>(a.integer("epochs", 5, 1, 1000000));
  const std::int64_t batch_size = a.integer("batch-size", 32, 1);
  const std::string opt_name =
      a.choice("optimizer", {"adam", "sgd", "rmsprop", "adagrad", "nadam", "adamw"}, "adam");
  const std::optional<double> lr = a.opt_real("lr", 0.0, 1e6);
  if (lr && *lr <= 0.0) throw UsageError("bad value for --lr: '" + a.str("lr") +
                                         "' (expected a positive number)");
  const auto seed = static_cast<std::uint64_t>(a.integer("seed", 42, 0));
  const auto threads = a.opt_integer("threads", 1, 4096);
  const std::string out = a.str("out", "model.soma");
  if (out.empty()) throw UsageError("bad value for --out: '' (expected a file path)");
  const std::string csv = a.str("csv", out + ".csv");
  const double validation_split = a.opt_real("validation-split", 0.0, 0.99).value_or(0.0);
  const int verbose = static_cast<int>(a.integer("verbose", 1, 0, 2));
  const bool distributed = a.has("distributed");
  const Device device = device_option(a);
  const std::string mixed_precision = precision_option(a);  // checked before any data is read
  if (!model_files_available())
    throw NotAvailable("cannot save the trained model: model files are not available yet in "
                       "this build (soma/model/serialization.hpp is missing)");

  if (threads) set_num_threads(static_cast<int>(*threads));
  set_seed(seed);
  if (distributed) dist::init();
  const bool main_rank = dist::is_main();  // the rank that prints and writes files
  if (main_rank) {  // a bad output path fails now, not after training
    check_output_path("--out", out);
    if (!csv.empty()) check_output_path("--csv", csv);
  }

  Dataset d = load_dataset(data_spec);
  const Shape input_shape(d.x_train.shape().begin() + 1, d.x_train.shape().end());
  std::shared_ptr<nn::Sequential> model =
      a.has("config") ? model_from_config(a.str("config"), input_shape, d.x_train.dtype())
                      : builtin_model(model_name, input_shape, d.num_classes);
  adapt_normalization_layers(*model, d.x_train);
  // The weights move before compile creates the optimiser, so its state is made on the device.
  move_model(*model, device);
  // A config may end with a softmax (or sigmoid): its outputs are probabilities already, and a
  // loss on logits would apply the softmax a second time (nn::outputs_probabilities).
  model->compile(make_optimizer(opt_name, lr),
                 nn::SparseCategoricalCrossentropy({.from_logits = !nn::outputs_probabilities(*model)}),
                 {metrics::Accuracy()}, {.mixed_precision = mixed_precision});
  if (verbose > 0 && main_rank) model->summary();

  nn::FitOptions fit{.epochs = epochs, .batch_size = batch_size};
  fit.verbose = verbose;
  fit.seed = seed;
  fit.distributed = distributed;
  if (validation_split > 0.0)
    fit.validation_split = validation_split;
  else
    fit.validation_data = nn::ValidationData(d.x_test, d.y_test);
  if (!csv.empty()) fit.callbacks.push_back(callbacks::CSVLogger(csv));
  // A NaN or infinite loss stops training; the model of the last epoch that ended well (weights
  // and optimiser state) is put back, saved, and the command fails. A NaN model is never saved.
  auto nan_stop = std::make_shared<callbacks::TerminateOnNaN>(
      callbacks::TerminateOnNaNOptions{.restore_last_good_weights = true, .verbose = 0});
  fit.callbacks.push_back(nan_stop);
  model->fit(d.x_train, d.y_train, fit);
  if (nan_stop->terminated()) {
    if (!main_rank) return kExitFailure;
    std::ostringstream msg;
    const double bad = nan_stop->invalid_loss();
    if (nan_stop->terminated_batch() >= 0)
      msg << "the training loss became " << (std::isnan(bad) ? "nan" : bad > 0 ? "inf" : "-inf")
          << " in epoch " << nan_stop->terminated_epoch() + 1 << " (batch "
          << nan_stop->terminated_batch() + 1 << ")";
    else
      msg << "the weights became NaN or infinite in epoch " << nan_stop->terminated_epoch() + 1;
    msg << "; training stopped. ";
    if (nan_stop->last_good_epoch() >= 0) {
      save_model_file(*model, out);
      msg << "Saved the model of epoch " << nan_stop->last_good_epoch() + 1
          << ", the last with a finite loss, to " << out;
    } else {
      msg << "No epoch ended with a finite loss and finite weights, so no model was saved ("
          << out
          << " was not written)";
    }
    msg << ". Try a lower --lr, or check the data for NaN or infinite values.";
    std::cout.flush();
    std::cerr << "soma train: " << msg.str() << std::endl;
    return kExitFailure;
  }

  const nn::Logs logs =
      model->evaluate(d.x_test, d.y_test, {.batch_size = std::max<std::int64_t>(batch_size, 256),
                                           .verbose = 0});
  if (!main_rank) return 0;
  save_model_file(*model, out);
  if (verbose > 0) {
    std::cout << "saved the model to " << out;
    if (!csv.empty()) std::cout << " and the metrics to " << csv;
    std::cout << "\n";
  }
  std::cout << result_line(logs.at("loss"), logs.at("accuracy")) << std::endl;
  return 0;
}

}  // namespace soma::cli
